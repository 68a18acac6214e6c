"""Holds the sitecustomize that ``pipecheck run`` puts first on the PYTHONPATH of the programs
it runs (this folder, not the package, is what goes on the path)."""
