"""gRPC fronts: TF Serving's PredictionService/ModelService and KServe V2's GRPCInferenceService on the serving core."""
