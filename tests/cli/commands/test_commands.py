import json
import re
from pathlib import Path

import pytest

from tests.conftest import ROOT, run_cli


def test_missing_suite_file_is_exit_2():
    r = run_cli("run", "no/such/suite.yaml")
    assert r.code == 2 and "no/such/suite.yaml: file not found" in r.err and "Traceback" not in r.err


def test_unknown_option_is_exit_2():
    r = run_cli("run", "--frobnicate")
    assert r.code == 2 and "No such option" in r.err


def test_validate_reports_each_file(tmp_path: Path):
    bad = ROOT / "tests" / "data" / "bad_suites" / "unknown_metric.yaml"
    r = run_cli("validate", str(ROOT / "suites" / "fashion_mnist.yaml"), str(bad))
    assert r.code == 2 and "ok: " in r.out and "unknown metric 'cosin'" in r.err


def test_report_rerenders_from_results(tmp_path: Path, tiny_suite: Path):
    out = tmp_path / "o"
    assert run_cli("run", str(tiny_suite), "--out", str(out), "-q").code == 0
    (out / "report.html").unlink()
    r = run_cli("report", str(out / "results.json"), "--out", str(tmp_path / "again.html"))
    assert r.code == 0 and "PASSED" in (tmp_path / "again.html").read_text()
    (tmp_path / "broken.json").write_text("{not json")
    r = run_cli("report", str(tmp_path / "broken.json"))
    assert r.code == 2 and "not valid JSON" in r.err


def test_quiet_prints_only_the_verdict(tmp_path: Path, tiny_suite: Path):
    r = run_cli("run", str(tiny_suite), "--out", str(tmp_path / "o"), "-q")
    assert r.out.strip() == "PASSED: suite 'tiny' (exit 0)"
    assert json.loads((tmp_path / "o" / "results.json").read_text())["passed"] is True


DEMO = ROOT / "demo" / "fashion_mnist"


def test_layerwise_command_without_a_suite(tmp_path: Path):
    import numpy as np

    np.savez(tmp_path / "in.npz", input=np.random.default_rng(0).uniform(0, 1, (3, 1, 28, 28)).astype(np.float32))
    out = tmp_path / "o"
    r = run_cli(
        "layerwise",
        str(DEMO / "fashion_cnn_fp32.onnx"),
        str(DEMO / "fashion_cnn_fp16.onnx"),
        "--inputs",
        str(tmp_path / "in.npz"),
        "--out",
        str(out),
    )
    assert r.code == 0, r.out + r.err
    line = "fashion_cnn_fp16 (fp16, checks: default for fp16): 15 of 15 reference tensors paired and compared"
    assert line + "; no divergence" in r.out
    res = json.loads((out / "results.json").read_text())
    stage = res["stages"][0]
    assert stage["name"] == "layerwise" and stage["samples"] == 3 and len(stage["candidates"][0]["rows"]) == 15
    # the written suite reruns the same comparison
    r2 = run_cli("run", str(out / "suite.yaml"), "--out", str(tmp_path / "again"))
    assert r2.code == 0 and "15 of 15 reference tensors paired and compared" in r2.out


def test_layerwise_command_generated_inputs_and_checks(tmp_path: Path):
    r = run_cli(
        "layerwise",
        str(DEMO / "fashion_cnn_fp32.onnx"),
        str(DEMO / "fashion_cnn_int8_qdq.onnx"),
        "--dim",
        "batch=4",
        "--check",
        "cosine>=0.99999",
        "--out",
        str(tmp_path / "o"),
    )
    assert r.code == 1 and "first divergence /features/block1/conv/Conv_output_0" in r.out
    r = run_cli(
        "layerwise",
        str(DEMO / "fashion_cnn_fp32.onnx"),
        str(DEMO / "fashion_cnn_fp16.onnx"),
        "--check",
        "cosine=1",
        "--out",
        str(tmp_path / "p"),
    )
    assert r.code == 2 and "expected METRIC<=VALUE" in r.err
    r = run_cli("layerwise", str(DEMO / "fashion_cnn_fp32.onnx"), "--out", str(tmp_path / "q"))
    assert r.code == 2 and "give a CANDIDATE" in r.err
    r = run_cli(
        "layerwise",
        str(DEMO / "fashion_cnn_fp32.onnx"),
        str(DEMO / "fashion_cnn_fp16.onnx"),
        "--dim",
        "batch=zero",
        "--out",
        str(tmp_path / "r"),
    )
    assert r.code == 2 and "--dim 'batch=zero'" in r.err


def test_layerwise_command_with_tensorrt_where_it_is_missing(tmp_path: Path):
    """No TensorRT on this machine: the suite is written and valid, the stage fails with exit 3 and the fix."""
    out = tmp_path / "o"
    r = run_cli(
        "layerwise",
        str(DEMO / "fashion_cnn_fp32.onnx"),
        "--backend",
        "tensorrt",
        "--precision",
        "fp16",
        "--out",
        str(out),
        block=("tensorrt", "polygraphy"),
    )
    assert r.code == 3, r.out + r.err
    assert "pip install" in r.out
    import yaml

    suite = yaml.safe_load((out / "suite.yaml").read_text())
    assert suite["backends"] == {"tensorrt": {"precisions": ["fp16"]}}
    assert suite["models"]["candidates"]["fashion_cnn_fp32"]["backend"] == "tensorrt"
    assert run_cli("validate", str(out / "suite.yaml")).code == 0


def test_a_model_under_test_that_cannot_be_loaded_fails_the_run(tmp_path: Path, tiny_dir: Path):
    """An ONNX candidate that ONNX Runtime cannot load is exit 1 (the model under test is broken); a candidate file
    that is not ONNX at all (issue 36: empty, cut short, text), like a path that does not exist, is a suite error:
    exit 2 at preflight, the file and line named, nothing run and no output folder made."""
    import onnx

    model = onnx.load(str(tiny_dir / "tiny.onnx"))
    model.graph.node[0].op_type = "NoSuchOp"  # valid ONNX, an operator no runtime has
    onnx.save(model, str(tiny_dir / "unknown_op.onnx"))
    (tiny_dir / "broken.onnx").write_bytes(b"\x08\x07 not a protobuf model")
    text = (
        "name: t\nmodels:\n  reference: tiny.onnx\n  candidates: {cand: CAND}\n"
        "inputs: {generate: {input: {shape: [1, 1, 8, 8]}}}\nstages: {layerwise: {}}\n"
    )
    suite = tiny_dir / "s.yaml"
    suite.write_text(text.replace("CAND", "unknown_op.onnx"))
    r = run_cli("run", str(suite), "--out", str(tmp_path / "o"))
    # an op no runtime has is, to TensorRT, a plugin: without a reference nothing the candidate outputs is computed
    assert r.code == 1 and "nothing it outputs can be computed here: after plugin NoSuchOp" in r.out
    assert "Traceback" not in r.out + r.err
    stage = json.loads((tmp_path / "o" / "results.json").read_text())["stages"][0]
    assert stage["status"] == "error" and stage["error"]["exit_code"] == 1
    for name, why in (("broken.onnx", "not a readable ONNX model"), ("missing.onnx", "file not found")):
        suite.write_text(text.replace("CAND", name))
        r = run_cli("run", str(suite), "--out", str(tmp_path / "p"))
        assert r.code == 2 and "s.yaml:4: models.candidates.cand.path: " in r.err and why in r.err, r.err
        assert "Traceback" not in r.err and not (tmp_path / "p").exists()


def test_a_suite_file_with_a_nul_byte_is_a_located_usage_error(tmp_path: Path):
    (tmp_path / "s.yaml").write_bytes(b"name: x\nmodels:\n  reference: a\x00.onnx\n")
    r = run_cli("validate", str(tmp_path / "s.yaml"))
    assert r.code == 2 and "s.yaml:3: control character U+0000 at column 15" in r.err and "Traceback" not in r.err


# --- issue 26: what the docs show runs as shown ------------------------------------------------------------------

CHECK_EXAMPLES = {  # one --check per metric the checks know, as a user writes it
    "max_abs": "max_abs<=0.5",
    "mean_abs": "mean_abs<=0.1",
    "max_rel": "max_rel<=10",
    "rel_l2": "rel_l2<=0.01",
    "cosine": "cosine>=0.97",
    "sqnr": "sqnr>=20",
    "frac_outside_tol": "frac_outside_tol@atol=1e-3,rtol=0.01<=0.05",
    "topk_agreement": "topk_agreement@k=5>=0.9",
}


def test_every_metric_has_a_check_example():
    from trtverify.config.checks import METRICS

    assert set(CHECK_EXAMPLES) == set(METRICS)


@pytest.mark.parametrize("metric", sorted(CHECK_EXAMPLES))
def test_check_accepts_every_metric_name(metric: str):
    """`rel_l2<=0.01` (the README's example) was rejected: the metric pattern had no digits."""
    from trtverify.config.checks import Check
    from trtverify.suitegen.adhoc import parse_check

    check = parse_check(CHECK_EXAMPLES[metric])
    assert check["metric"] == metric
    Check(**check)  # what the suite loader will accept


@pytest.mark.parametrize(
    "text, why",
    [
        ("rel_l2>=0.01", "lower-is-better: write rel_l2<=VALUE"),
        ("cosine<=0.9", "higher-is-better: write cosine>=VALUE"),
        ("cosin>=0.9", "unknown metric 'cosin'"),
        ("rel_l2@k=1<=0.1", "'k' is not a parameter of rel_l2"),
        ("cosine>=2", "out of range"),
        ("cosine=1", "expected METRIC<=VALUE"),
    ],
)
def test_a_bad_check_says_what_to_write(text: str, why: str):
    from trtverify.suitegen.adhoc import parse_check
    from trtverify.util.errors import UsageError

    with pytest.raises(UsageError, match=re.escape(why)):
        parse_check(text)


def test_the_readme_check_example_runs(tmp_path: Path):
    import numpy as np

    np.savez(tmp_path / "inputs.npz", input=np.random.default_rng(0).uniform(0, 1, (2, 1, 28, 28)).astype("float32"))
    r = run_cli(
        "layerwise",
        str(DEMO / "fashion_cnn_fp32.onnx"),
        str(DEMO / "fashion_cnn_fp16.onnx"),
        "--inputs",
        str(tmp_path / "inputs.npz"),
        "--check",
        "rel_l2<=0.01",
        "max_abs<=0.05",
        "--out",
        str(tmp_path / "o"),
    )
    assert r.code == 0, r.out + r.err
    import yaml

    stage = yaml.safe_load((tmp_path / "o" / "suite.yaml").read_text())["stages"]["layerwise"]
    assert stage["checks"] == [{"metric": "rel_l2", "max": 0.01}, {"metric": "max_abs", "max": 0.05}]


def test_options_with_several_values_take_them_after_one_flag_or_repeated(tmp_path: Path):
    """One rule for every repeatable option: several values after one flag (Polygraphy), or the flag repeated
    (pytest). Each of these command lines was exit 2 ("unexpected extra argument")."""
    suite = ROOT / "suites" / "fashion_mnist.yaml"
    r = run_cli("run", str(suite), "--stage", "framework", "buildlog", "--out", str(tmp_path / "r"), "-q")
    assert r.code == 0, r.out + r.err
    ran = [s["name"] for s in json.loads((tmp_path / "r" / "results.json").read_text())["stages"]]
    assert ran == ["framework", "buildlog"]

    fp32, fp16, int8 = (str(DEMO / f"fashion_cnn_{p}.onnx") for p in ("fp32", "fp16", "int8_qdq"))
    r = run_cli("init", fp32, "--candidate", fp16, int8, "-o", str(tmp_path / "s.yaml"))
    assert r.code == 0, r.err
    import yaml

    assert len(yaml.safe_load((tmp_path / "s.yaml").read_text())["models"]["candidates"]) == 2

    keep = ["/features/block1/conv/Conv", "/classifier/fc2/Gemm"]
    r = run_cli("convert", fp32, "--precision", "fp16", "--keep", *keep, "-o", str(tmp_path / "k.onnx"))
    assert r.code == 0, r.err
    import onnx

    kept = {n.name for n in onnx.load(str(tmp_path / "k.onnx")).graph.node if n.name in keep}
    assert kept == set(keep)

    exports = ROOT / "tests" / "data" / "engine_exports"
    a = sorted(str(p) for p in (exports / "fp16").glob("*.json"))
    b = sorted(str(p) for p in (exports / "qat").glob("*.json"))
    r = run_cli("engine", "diff", *a, "--vs", *b, "--json")
    assert r.code == 0, r.err
    d = json.loads(r.out)
    folders = json.loads(run_cli("engine", "diff", str(exports / "fp16"), "--vs", str(exports / "qat"), "--json").out)
    assert (d["total_a_ms"], d["total_b_ms"]) == (folders["total_a_ms"], folders["total_b_ms"])


def test_an_option_with_an_equals_sign_takes_one_value(tmp_path: Path):
    """`--check=VALUE REF CAND`: the '=' form is one value, the models stay arguments."""
    fp32, fp16 = (str(DEMO / f"fashion_cnn_{p}.onnx") for p in ("fp32", "fp16"))
    r = run_cli("layerwise", "--check=rel_l2<=0.3", fp32, fp16, "--out", str(tmp_path / "o"), "-q")
    assert r.code == 0, r.err


def test_an_option_that_swallows_the_arguments_says_so():
    """`init --candidate A B MODEL`: the option takes MODEL too; the error shows what it took and the fix."""
    fp32, fp16 = (str(DEMO / f"fashion_cnn_{p}.onnx") for p in ("fp32", "fp16"))
    r = run_cli("init", "--candidate", fp16, fp32)
    assert r.code == 2 and "Missing argument 'MODEL'" in r.err
    assert "--candidate took 2 values" in r.err and "end the values with --" in r.err


def test_the_several_values_note_comes_only_where_it_explains_the_error(tmp_path: Path, tiny_suite: Path):
    """A second run's refusal (another run writes to --out) said `note: --stage took 2 values` too: the note
    is for an option that took the command's argument, not for every usage error after a several-valued option."""
    import os

    out = tmp_path / "busy"
    out.mkdir()
    (out / ".trtverify.lock").write_text(f"{os.getpid()}\n")  # a live process holds it: this test's own
    r = run_cli("run", str(tiny_suite), "--out", str(out), "--stage", "framework", "layerwise")
    assert r.code == 2 and "another trtverify run" in r.err and "is writing there" in r.err, r.err
    assert "note:" not in r.err and "took 2 values" not in r.err, r.err

    r = run_cli("run", str(tiny_suite), "--stage", "framework", "nosuch", "--out", str(tmp_path / "o"))
    assert r.code == 2 and "nosuch: no such stage" in r.err and "note:" not in r.err, r.err

    # the case it is for: --dim took the candidate model, and the error asks for a CANDIDATE
    fp32, fp16 = (str(DEMO / f"fashion_cnn_{p}.onnx") for p in ("fp32", "fp16"))
    r = run_cli("layerwise", fp32, "--dim", "batch=8", fp16, "--out", str(tmp_path / "o"))
    assert r.code == 2 and "give a CANDIDATE model" in r.err, r.err
    assert f"note: --dim took 2 values: batch=8 {fp16}" in r.err, r.err


def test_quiet_prints_the_verdict_line_and_nothing_else(tmp_path: Path, tiny_suite: Path):
    """-q printed `results:` and `report:` on stderr; docs/cli.md says the verdict line only."""
    r = run_cli("run", str(tiny_suite), "--out", str(tmp_path / "o"), "-q", "--junit", str(tmp_path / "j.xml"))
    assert r.code == 0 and r.out.strip() == "PASSED: suite 'tiny' (exit 0)" and r.err == "", r.err
    assert (tmp_path / "j.xml").is_file()


def test_repair_prints_every_export(tmp_path: Path):
    """It printed only the trtexec keep-list; the README promises trtexec, Polygraphy and ONNX Runtime."""
    import numpy as np

    repair_demo = ROOT / "demo" / "fp16_repair"
    data = np.load(DEMO / "data" / "test_subset.npz", allow_pickle=False)
    np.savez(tmp_path / "in.npz", input=(data["images"][:4].astype("float32") / 255.0))
    r = run_cli(
        "repair",
        str(repair_demo / "fashion_bn_fp32.onnx"),
        "--precision",
        "fp16",
        "--inputs",
        str(tmp_path / "in.npz"),
        "--out",
        str(tmp_path / "o"),
    )
    assert r.code == 0, r.out + r.err
    for label in ("TensorRT 11", "trtexec (TensorRT <= 10): --layerPrecisions=", "polygraphy", "onnxruntime float16",
                  "quantize_static(nodes_to_exclude", "ModelOpt AutoCast: --nodes_to_exclude"):  # fmt: skip
        assert label in r.out, (label, r.out)
