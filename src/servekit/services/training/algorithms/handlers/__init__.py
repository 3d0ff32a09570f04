"""Inference scripts of SageMaker's first-party algorithms (``model_fn``/``input_fn``/``predict_fn``/``output_fn``, the
toolkit's contract): an endpoint of a model whose image is one of them serves its artefact with the script here (the
hosting service composes the model's version with this folder as its ``code/``)."""
