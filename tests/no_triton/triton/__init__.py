# Put tests/no_triton first on PYTHONPATH and `import triton` fails, as on macOS or Windows where
# Triton publishes no build (`make test-no-triton`). Subprocesses and Jupyter kernels inherit it.
raise ImportError("No module named 'triton' (this test hides it)")
