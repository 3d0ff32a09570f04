"""SageMaker's first-party LDA (the ``lda`` image; the SDK's ``LDA`` estimator), trained and served here.

Training reads the ``train`` channel (RecordIO-protobuf, the SDK's ``RecordSet``, dense or sparse, or CSV): one
document a record, its features the counts of each word of a vocabulary of ``feature_dim`` words. It checks the
hyperparameters as AWS does (``num_topics``, ``feature_dim`` and ``mini_batch_size`` required; ``alpha0``,
``max_restarts``, ``max_iterations`` and ``tol`` positive) and fits ``num_topics`` topics by variational Bayes
(Blei, Ng and Jordan; the batch algorithm of Hoffman, Blei and Bach, as scikit-learn's
``LatentDirichletAllocation(learning_method="batch")`` runs it), with a Dirichlet prior of ``alpha0 / num_topics``
on each document's topic mixture and ``1 / num_topics`` on each topic's words, seeded. A ``test`` channel is scored
by its per-word log-likelihood, ``test:pwll`` (the tuner's objective, to maximise): each test document's topic
mixture inferred with the topics held fixed, then the log of each of its words' probability under that mixture,
summed and divided by the number of words.

Where it differs from AWS's: AWS's LDA is a spectral method (a tensor decomposition of the corpus's word
co-occurrence moments by alternating least squares, which ``max_restarts``, ``max_iterations`` and ``tol`` steer,
then ``alpha0`` refined). servekit's variational EM finds topics of the same model but not the same numbers, and
those three hyperparameters are checked without effect. Its ``test:pwll`` is the plug-in estimate above, not AWS's
figure. The model (``model_algo-1``) is servekit's: the topics' word weights and the prior as NumPy arrays (AWS's is
an MXNet parameter file).

Serving (:func:`topic_mixture`): each document's ``topic_mixture`` (``num_topics`` weights that sum to 1), as AWS
answers.
"""

from __future__ import annotations

import io
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from servekit.services.training.algorithms import first_party as fp

MODEL_FILE = "model_algo-1"
EM_PASSES = 50  # variational EM passes over the corpus at most
EM_TOL = 1e-4  # ...stopping when the per-word log-likelihood of the corpus changes less than this, relatively
DOC_ITERATIONS = 100  # a document's mixture updates at most (scikit-learn's max_doc_update_iter)
DOC_TOL = 1e-3  # ...stopping when its weights change less than this on average (scikit-learn's mean_change_tol)


def _positive_float(text: str) -> float:
    value = float(text)
    if not value > 0 or not np.isfinite(value):
        raise ValueError("a positive number")
    return value


HYPERPARAMETERS = {
    "num_topics": fp.Param(fp.integer(1), required=True),
    "feature_dim": fp.Param(fp.integer(1), required=True),
    "mini_batch_size": fp.Param(fp.integer(1), required=True),
    "alpha0": fp.Param(_positive_float, 1.0),
    "max_restarts": fp.Param(fp.integer(1), 10),
    "max_iterations": fp.Param(fp.integer(1), 1000),
    "tol": fp.Param(_positive_float, 1e-8),
}


@dataclass(frozen=True)
class Model:
    """The topics (``num_topics`` rows of variational word weights, ``lambda``) and the prior on documents' topic
    mixtures (``alpha``, one per topic)."""

    topics: npt.NDArray[np.float64]
    alpha: npt.NDArray[np.float64]

    @property
    def word_probabilities(self) -> npt.NDArray[np.float64]:
        return np.asarray(self.topics / self.topics.sum(1, keepdims=True))


@dataclass(frozen=True)
class _Counts:
    """A corpus as its nonzero counts: document, word and count of each."""

    docs: npt.NDArray[np.intp]
    words: npt.NDArray[np.intp]
    counts: npt.NDArray[np.float64]
    n_docs: int
    n_words: int

    @classmethod
    def of(cls, x: npt.NDArray[np.float64]) -> _Counts:
        docs, words = np.nonzero(x)
        return cls(docs, words, np.asarray(x[docs, words], dtype=np.float64), x.shape[0], x.shape[1])


def digamma(x: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
    """ψ(x) for x > 0 (NumPy has none; SciPy is not a dependency): the recurrence ψ(x) = ψ(x + 1) - 1/x up to 6,
    then the asymptotic series, good to about 1e-12."""
    x = np.array(x, dtype=np.float64)
    out = np.zeros_like(x)
    for _ in range(6):
        small = x < 6
        out -= np.where(small, 1.0 / np.where(small, x, 1.0), 0.0)
        x = np.where(small, x + 1.0, x)
    inv2 = 1.0 / (x * x)
    series = inv2 * (1 / 12 - inv2 * (1 / 120 - inv2 * (1 / 252 - inv2 * (1 / 240 - inv2 / 132))))
    return np.asarray(out + np.log(x) - 0.5 / x - series)


def _exp_expected_log(weights: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
    """exp(E[log p]) of each row's Dirichlet(weights): the factor variational Bayes weighs each word by."""
    return np.asarray(np.exp(digamma(weights) - digamma(weights.sum(1))[:, None]))


def _per_doc(c: _Counts, values: npt.NDArray[np.float64], k: int) -> npt.NDArray[np.float64]:
    """Each document's sum of ``values`` (one row of ``k`` per nonzero count; np.nonzero lists them by document)."""
    out = np.zeros((c.n_docs, k))
    if len(c.docs):
        starts = np.flatnonzero(np.r_[True, c.docs[1:] != c.docs[:-1]])
        out[c.docs[starts]] = np.add.reduceat(values, starts, axis=0)
    return out


def _mixtures(
    c: _Counts, exp_beta: npt.NDArray[np.float64], alpha: npt.NDArray[np.float64], gamma: npt.NDArray[np.float64]
) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.float64], npt.NDArray[np.float64]]:
    """The E-step: each document's variational topic weights (``gamma``, from the given start), with the last
    ``exp(E[log θ])`` and each count's normaliser."""
    k = exp_beta.shape[0]
    beta_at = exp_beta[:, c.words].T  # each nonzero count's word's weight in each topic
    for _ in range(DOC_ITERATIONS):
        exp_theta = _exp_expected_log(gamma)
        norm = np.einsum("ij,ij->i", exp_theta[c.docs], beta_at) + 1e-100
        updated = alpha + exp_theta * _per_doc(c, (c.counts / norm)[:, None] * beta_at, k)
        change = float(np.abs(updated - gamma).mean(1).max()) if len(gamma) else 0.0
        gamma = updated
        if change < DOC_TOL:
            break
    exp_theta = _exp_expected_log(gamma)
    norm = np.einsum("ij,ij->i", exp_theta[c.docs], beta_at) + 1e-100
    return gamma, exp_theta, norm


def _log_likelihood(c: _Counts, model: Model, gamma: npt.NDArray[np.float64]) -> tuple[float, float]:
    """The corpus's log-likelihood under each document's mean topic mixture and the topics' mean word
    probabilities, and its number of words."""
    theta = gamma / gamma.sum(1, keepdims=True)
    p = (theta[c.docs] * model.word_probabilities[:, c.words].T).sum(1)
    return float((c.counts * np.log(np.maximum(p, 1e-300))).sum()), float(c.counts.sum())


def fit(x: npt.NDArray[np.float64], hp: dict[str, Any], seed: int = 0) -> Model:
    """``num_topics`` topics of the documents (rows of word counts) by batch variational EM."""
    k = int(hp["num_topics"])
    c = _Counts.of(x)
    rng = np.random.default_rng(seed)
    alpha = np.full(k, float(hp["alpha0"]) / k)
    eta = 1.0 / k
    topics = rng.gamma(100.0, 1.0 / 100.0, size=(k, x.shape[1]))
    gamma = np.ones((c.n_docs, k))
    before = -np.inf
    for _ in range(EM_PASSES):
        exp_beta = _exp_expected_log(topics)
        gamma, exp_theta, norm = _mixtures(c, exp_beta, alpha, gamma)
        weights = exp_theta[c.docs] * (c.counts / norm)[:, None]
        stats = np.stack([np.bincount(c.words, weights=weights[:, j], minlength=c.n_words) for j in range(k)])
        topics = eta + stats * exp_beta
        ll, n = _log_likelihood(c, Model(topics, alpha), gamma)
        per_word = ll / max(n, 1.0)
        if np.isfinite(before) and abs(per_word - before) <= EM_TOL * abs(before):
            break
        before = per_word
    return Model(topics, alpha)


def topic_mixture(x: npt.NDArray[np.float64], model: Model) -> npt.NDArray[np.float64]:
    """Each document's topic mixture (rows that sum to 1), the topics held fixed."""
    return _infer(x, model)[0]


def _infer(x: npt.NDArray[np.float64], model: Model) -> tuple[npt.NDArray[np.float64], _Counts]:
    if x.ndim != 2 or x.shape[1] != model.topics.shape[1]:
        raise ValueError(f"each record needs {model.topics.shape[1]} features, not {x.shape[-1] if x.size else 0}")
    if x.size and float(x.min()) < 0:
        raise ValueError("word counts cannot be negative")
    c = _Counts.of(x)
    start = np.ones((c.n_docs, len(model.alpha)))
    gamma = _mixtures(c, _exp_expected_log(model.topics), model.alpha, start)[0]
    return gamma / gamma.sum(1, keepdims=True), c


def per_word_log_likelihood(x: npt.NDArray[np.float64], model: Model) -> float:
    """``pwll``: the documents' log-likelihood per word, each under its own inferred topic mixture."""
    theta, c = _infer(x, model)
    ll, n = _log_likelihood(c, model, theta)
    if n <= 0:
        raise ValueError("the documents hold no words")
    return ll / n


def save(model: Model, folder: Path) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    buffer = io.BytesIO()
    np.savez(buffer, topics=model.topics, alpha=model.alpha)
    (folder / MODEL_FILE).write_bytes(buffer.getvalue())


def load(folder: Path) -> Model:
    with np.load(io.BytesIO((folder / MODEL_FILE).read_bytes()), allow_pickle=False) as arrays:
        return Model(np.asarray(arrays["topics"], dtype=np.float64), np.asarray(arrays["alpha"], dtype=np.float64))


def _documents(name: str, hp: dict[str, Any], required: bool = True) -> npt.NDArray[np.float64] | None:
    found = fp.channel(name, required)
    if found is None:
        return None
    x = found[0]
    fp.check_width(x, hp["feature_dim"], name)
    if x.size and float(x.min()) < 0:
        raise fp.AlgorithmError(f"The {name} channel holds negative word counts")
    if not np.isfinite(x).all():
        raise fp.AlgorithmError(f"The {name} channel holds NaN or infinite word counts")
    return x


def main() -> None:
    hp = fp.hyperparameters(fp.raw_hyperparameters(), HYPERPARAMETERS)
    x = _documents("train", hp)
    assert x is not None
    if float(x.sum()) <= 0:
        raise fp.AlgorithmError("The train channel's documents hold no words")
    model = fit(x, hp)
    fp.say(f"#train_score (algo-1) : ('pwll', {per_word_log_likelihood(x, model)})")
    test = _documents("test", hp, required=False)
    if test is not None:
        try:
            fp.report("test", {"pwll": per_word_log_likelihood(test, model)})
        except ValueError as exc:
            raise fp.AlgorithmError(f"The test channel: {exc}") from None
    save(model, fp.MODEL_DIR)


if __name__ == "__main__":
    raise SystemExit(fp.run(main))
