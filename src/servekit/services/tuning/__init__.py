"""SageMaker hyperparameter tuning jobs on ``servekit up``: training jobs launched by a search strategy (Random,
Grid, Bayesian with Optuna), the best one by the objective metric."""
