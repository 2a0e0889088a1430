"""`trtverify reduce`: the smallest subgraph that still shows a layerwise divergence, and its bug-report bundle."""
