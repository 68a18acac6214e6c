"""Framework callbacks that measure the training dataloader where users train through a
framework rather than a bare loop:

* :mod:`pipecheck.integrations.lightning`: ``PipecheckCallback`` for ``lightning.pytorch``
  (or ``pytorch_lightning``) ``Trainer.fit``;
* :mod:`pipecheck.integrations.transformers`: ``PipecheckCallback`` for the Hugging Face
  ``Trainer``.

Each module imports its framework when it is imported itself; ``import pipecheck`` imports
neither. Install both with ``pip install "pipecheck[integrations]"``.
"""
