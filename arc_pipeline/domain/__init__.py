"""Domain objects: grids, tasks, augmentation and prompts."""
