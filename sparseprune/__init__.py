"""sparseprune: prune networks into tensor-core friendly sparsity patterns and run them on packed kernels."""

__version__ = "0.1.0"
