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

__version__ = "0.1.0"
