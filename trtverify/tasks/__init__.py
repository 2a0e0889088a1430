"""Task metrics (classification, detection, segmentation) computed on a validation set for the e2e stage."""
