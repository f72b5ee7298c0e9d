"""gnmr inside the training stacks people use, one module per framework:

* :mod:`gnmr.integrations.hf` — a Hugging Face ``transformers.Trainer``
  callback (``pip install gnmr[hf]``: transformers, accelerate);
* :mod:`gnmr.integrations.lightning` — a Lightning ``Callback``
  (``pip install gnmr[lightning]``);
* :mod:`gnmr.integrations.torchao` — GNMR's promotion on torchao's
  ``Float8Linear`` (``pip install gnmr[torchao]``);
* :mod:`gnmr.integrations.torchtitan` — torchtitan's optimizer container,
  every AdamW group guarded (``pip install gnmr[torchtitan]``).

Importing this package imports no framework; each module imports its own
when it is imported (and raises ImportError naming the extra when missing).
docs/python.md (the recipe, Lightning, torchtitan), has the exact code for each.
"""
