"""The first-party LDA (issue 45): hyperparameters checked as SageMaker checks them, variational EM recovering the
topics of a corpus built from them, the same topics from the same data (seeded), topic mixtures that sum to 1,
``test:pwll`` reported from a job's channels; the inference script's formats (dense and sparse)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from numpy.testing import assert_allclose

from servekit.services.training.algorithms import first_party as fp
from servekit.services.training.algorithms import lda
from servekit.services.training.algorithms.handlers import lda as handler
from servekit.serving.codecs import recordio_protobuf as rp

WORDS = 12  # three topics of four words each, no word shared


def _corpus(n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Documents of 40 words, each drawn from one of three topics: the counts and each one's topic."""
    rng = np.random.default_rng(seed)
    topic = rng.integers(3, size=n)
    x = np.zeros((n, WORDS))
    for i, t in enumerate(topic):
        x[i, 4 * t : 4 * t + 4] = rng.multinomial(40, [0.25] * 4)
    return x, topic


def _hp(**raw: str) -> dict[str, object]:
    return fp.hyperparameters({"num_topics": "3", "feature_dim": str(WORDS), "mini_batch_size": "60", **raw},
                              lda.HYPERPARAMETERS)  # fmt: skip


def test_digamma_matches_known_values() -> None:
    euler = 0.5772156649015329
    got = lda.digamma(np.array([1.0, 0.5, 10.0]))
    assert_allclose(got, [-euler, -euler - 2 * np.log(2), 2.251752589066721], atol=1e-10)


def test_variational_em_recovers_the_topics_and_is_seeded() -> None:
    x, _ = _corpus(60, 0)
    model = lda.fit(x, _hp())
    words = model.word_probabilities
    blocks = sorted(int(np.argmax([w[4 * b : 4 * b + 4].sum() for b in range(3)])) for w in words)
    assert blocks == [0, 1, 2]  # one topic per block of words
    assert all(max(w[4 * b : 4 * b + 4].sum() for b in range(3)) > 0.9 for w in words)
    assert_allclose(lda.fit(x, _hp()).topics, model.topics)
    test, topic = _corpus(9, 1)
    mixture = lda.topic_mixture(test, model)
    assert_allclose(mixture.sum(1), 1.0)
    assert (mixture.max(1) > 0.8).all()
    same = mixture.argmax(1)
    assert all((same[topic == t] == same[topic == t][0]).all() for t in set(topic))  # same topic, same answer
    assert len(set(same)) == len(set(topic))
    better, worse = (
        lda.per_word_log_likelihood(test, model),
        lda.per_word_log_likelihood(test, lda.fit(x, _hp(num_topics="1"))),
    )
    assert np.log(1 / 4) - 0.2 < better and worse < better  # near log(1/4): the right four words each time


@pytest.mark.parametrize(
    ("raw", "says"),
    [
        ({"num_topics": "3", "feature_dim": "12"}, "Missing required hyperparameter: mini_batch_size"),
        ({"num_topics": "0", "feature_dim": "12", "mini_batch_size": "1"}, "Hyperparameter num_topics: '0'"),
        ({"num_topics": "2", "feature_dim": "12", "mini_batch_size": "1", "alpha0": "0"}, "alpha0: '0' is not valid"),
        ({"num_topics": "2", "feature_dim": "12", "mini_batch_size": "1", "tol": "-1e-8"}, "Hyperparameter tol"),
        ({"num_topics": "2", "feature_dim": "12", "mini_batch_size": "1", "k": "2"}, "(k was unexpected)"),
    ],
)
def test_hyperparameters_are_checked_as_sagemaker_does(raw: dict[str, str], says: str) -> None:
    with pytest.raises(fp.AlgorithmError) as exc:
        fp.hyperparameters(raw, lda.HYPERPARAMETERS)
    assert says in str(exc.value)


def _job(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, hps: dict[str, str], **channels: bytes) -> None:
    config, data = tmp_path / "config", tmp_path / "data"
    config.mkdir()
    (config / "hyperparameters.json").write_text(json.dumps(hps))
    (config / "inputdataconfig.json").write_text(json.dumps({c: {} for c in channels}))
    for name, body in channels.items():
        (data / name).mkdir(parents=True)
        (data / name / "part-0").write_bytes(body)
    for attr, value in (("CONFIG", config), ("DATA", data), ("MODEL_DIR", tmp_path / "model")):
        monkeypatch.setattr(fp, attr, value)
    monkeypatch.setattr(fp, "FAILURE", tmp_path / "failure")


def test_a_job_reports_test_pwll_and_saves_a_model_the_handler_serves(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    x, _ = _corpus(30, 2)
    hps = {"num_topics": "3", "feature_dim": str(WORDS), "mini_batch_size": "30", "alpha0": "1.5"}
    _job(tmp_path, monkeypatch, hps, train=rp.write(x.astype(np.float32)), test=rp.write(x[:5].astype(np.float32)))
    assert fp.run(lda.main) == 0
    line = next(li for li in capsys.readouterr().out.splitlines() if li.startswith("[0]\t"))
    assert line.startswith("[0]\ttest-pwll:-") and float(line.split(":")[1]) > np.log(1 / WORDS)
    model = handler.model_fn(str(tmp_path / "model"))
    assert_allclose(model.alpha, [0.5] * 3)
    doc = x[0]
    keys = np.flatnonzero(doc).tolist()
    sparse = {"keys": keys, "shape": [WORDS], "values": doc[keys].tolist()}
    answers = []
    for body, kind in (
        (rp.write(doc[None].astype(np.float32)), rp.CONTENT_TYPE),
        (",".join(map(str, doc)) + "\n", "text/csv"),
        (json.dumps({"instances": [{"features": doc.tolist()}]}), "application/json"),
        (json.dumps({"instances": [{"data": {"features": sparse}}]}), "application/json"),
        (json.dumps({"data": {"features": {"values": doc.tolist()}}}) + "\n", "application/jsonlines"),
    ):
        answers.append(handler.predict_fn(handler.input_fn(body, kind), model)[0]["topic_mixture"])
    assert_allclose(answers, [answers[0]] * len(answers), rtol=1e-6)
    assert len(answers[0]) == 3 and abs(sum(answers[0]) - 1) < 1e-9
    predictions = [{"topic_mixture": answers[0]}]
    body, kind = handler.output_fn(predictions, "application/json")
    assert kind == "application/json" and json.loads(body)["predictions"][0]["topic_mixture"] == answers[0]
    body, kind = handler.output_fn(predictions, rp.CONTENT_TYPE)
    record = rp.Record()
    record.ParseFromString(next(rp.frames(body)))
    assert_allclose(record.label["topic_mixture"].float32_tensor.values, answers[0], rtol=1e-6)
    body, kind = handler.output_fn(predictions, "text/csv")  # a batch transform's lines
    assert kind == "text/csv" and [float(v) for v in body.decode().strip().split(",")] == answers[0]
    with pytest.raises(ValueError, match="not one LDA takes"):
        handler.input_fn(b"x", "image/png")
    with pytest.raises(ValueError, match="needs 12 features"):
        lda.topic_mixture(np.ones((1, 3)), model)


def test_a_job_fails_naming_what_is_wrong(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    x, _ = _corpus(5, 3)
    hps = {"num_topics": "2", "feature_dim": "13", "mini_batch_size": "5"}
    _job(tmp_path, monkeypatch, hps, train=rp.write(x.astype(np.float32)))
    assert fp.run(lda.main) == 2
    assert (
        tmp_path / "failure"
    ).read_text() == "ClientError: feature_dim is 13 but the train channel's records have 12"
