"""What pruning is, apart from Lightning: the GEMM view of a weight, importance scores, the
patterns, ranking units across layers, the stage schedule and apriori tuning."""
