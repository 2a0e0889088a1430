"""Task metrics (classification, detection) computed on a validation set for the e2e stage."""
