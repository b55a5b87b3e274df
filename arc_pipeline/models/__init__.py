"""The base model: its folder contract, its tokens, and the ways the ``model`` stage builds or fetches it.

- ``folder``: what every stage loads (``check_model_dir``, ``load_tokenizer``, ``model.json``);
- ``tokens``: the Llama 3.1 special tokens, the pad rule, BOS and stop ids;
- ``tokenizer``: the offline tokenizers (a tiny BPE, a full-size Llama 3 vocabulary) with the chat template;
- ``tiny``, ``random``: the models built offline; ``warmup``: their answer-format warm-up;
- ``sources``: a hub download or a local folder, with the pad fix of their saved tokenizer config.

Nothing is imported here, so that ``arc_pipeline.models.folder`` stays light for every stage.
"""
