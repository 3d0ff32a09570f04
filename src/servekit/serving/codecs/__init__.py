"""Wire formats shared by more than one part: TF Serving JSON, KServe V2 tensors, SageMaker content types.

Pure functions of bytes and parsed values; nothing here knows a server, a route or a model manager.
"""
