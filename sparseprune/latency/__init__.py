"""Predicted times of each prunable layer's sparse and dense calls: a calibrated table where one exists for this GPU
and kernel build, else an analytic model; and the allocation that spends sparsity where it saves time."""
