"""Stage `layerwise`: every intermediate tensor of the reference against each candidate (`stage.run`)."""
