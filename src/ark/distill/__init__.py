"""Label-free distillation: teacher trajectories rendered as training rows, LoRA training with trl and peft."""
