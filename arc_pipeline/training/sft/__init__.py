"""The SFT stage (``arc-pipeline sft``): supervised fine-tuning of the refiner on its own correct refinements.

config.py holds ``SftConfig``; trainer.py builds TRL's SFT trainer and runs it. It reuses the GRPO stage's base
model, LoRA, checkpoint and metric helpers and ``processes``' checkpoint on SIGTERM; nothing imports it but the
stage command (arc_pipeline/stages/sft.py) and the workflow config.
"""
