"""Stand-ins for the libraries SageMaker's framework containers put beside a script (``sagemaker_xgboost_container``):
this folder is on the ``PYTHONPATH`` of every script-mode job, so a script written for the container imports them.
Each holds only what scripts call, over servekit's own readers."""
