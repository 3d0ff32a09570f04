"""What scripts import from SageMaker's XGBoost container (``sagemaker_xgboost_container``): ``data_utils.get_dmatrix``
and the ``encoder`` functions, over servekit's readers (servekit's Python runs the script)."""
