"""What a run feeds and keeps: the inputs built from a suite, and the stored PyTorch reference outputs."""
