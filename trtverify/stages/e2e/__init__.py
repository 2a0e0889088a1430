"""Stage `e2e`: task metrics of the reference and each candidate on a validation set (`stage.run`)."""
