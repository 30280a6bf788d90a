"""ARK: adaptive knowledge-graph retrieval as a reproducible pipeline."""
import os

# Offline defaults that must be in place before litellm / wandb / HF are imported anywhere.
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("DVC_NO_ANALYTICS", "1")
os.environ.setdefault("WANDB_MODE", "offline")
os.environ.setdefault("WANDB_DIR", "logs")
os.environ.setdefault("WANDB_SILENT", "true")
# torch's OpenMP threads spin 300,000 rounds at each barrier before sleeping; on a machine whose other processes hold
# the cores that spinning starves them and the model alike (embedded evaluation beside two busy processes: 3.6x its
# quiet time, 2.8x with 10,000; the same quiet time). Must be set before torch loads libgomp; a value set wins.
os.environ.setdefault("GOMP_SPINCOUNT", "10000")

__version__ = "0.1.0"
