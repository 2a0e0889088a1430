"""The rules added after reading the hold-out part d/ (issue 39's fix round), each on a snippet written in its tool's
format but not copied from a d/ log (other names, sizes and layouts), so that a rule fitted to one log's text fails
here. Formats: jetson-inference's `[TRT]    ` prefix (tensorNet.cpp's LOG_TRT), Myelin's `ScalarOp not handled` /
`In <fn> at <file>:<line>` and `<file>:<line>: DCHECK(...) failed`, the ONNX parser's node dump, ModelOpt's console
without a time (modelopt/onnx/logging_config.py) and its CLI options, Polygraphy's inspect profile and layer lines,
its build-loader profile echo (tuples), a comparison cut before its error metrics, trtexec's totals, TensorRT-LLM's
`Config saved to`, Torch-TensorRT's `ir was set to default`, and engine files named by a shell command or listing."""

from __future__ import annotations

from trtverify.buildlog.parser import parse


def _by_kind(text: str) -> dict:
    out: dict = {}
    for f in parse(text).findings:
        out.setdefault(f.kind, []).append(f)
    return out


def test_jetson_inference_prefix_and_fusions_as_written() -> None:
    text = (
        "[TRT]    Running: ConvBatchNormFusion on backbone.conv1\n"
        "[TRT]    ConvBatchNormFusion: Fusing backbone.conv1 with backbone.bn1\n"
        "[TRT]    Fusing deconvolution weights from up.0 with scale up.bn\n"
    )
    (fu,) = _by_kind(text)["layer_fusion"]
    assert fu.detail["fusions"][0] == {
        "pass": "ConvBatchNormFusion",
        "fused": ["backbone.conv1", "backbone.bn1"],
        "as_written": "backbone.conv1 with backbone.bn1",
    }
    assert fu.detail["fusions"][1]["fused"] == ["up.0", "scale up.bn"]
    assert "ConvBatchNormFusion: backbone.conv1 with backbone.bn1" in fu.message
    assert "up.0 with scale up.bn" in fu.message


def test_myelin_op_not_handled_and_internal_check_name_op_and_source() -> None:
    one_line = (
        "[E] [TRT] 1: [codeGenerator.cpp::compileGraph::894] Error Code 1: Internal Error (ScalarOp not handled: "
        "CAST_F16_TO_BF16. In getEquivalentMyelinCoord at /_src/optimizer/myelin/codeGenerator.cpp:4012)\n"
    )
    (f,) = _by_kind(one_line)["myelin_failure"]
    assert f.detail["op"] == "CAST_F16_TO_BF16" and f.detail["source"] == "codeGenerator.cpp:4012"
    assert f.layers == ("CAST_F16_TO_BF16",) and f.severity == "high"
    wrapped = (
        "Error Code 1: Internal Error\n(ScalarOp not handled: POW_F32.\nIn lowerScalar at /src/myelin/ops.cpp:77)\n"
    )
    (f,) = _by_kind(wrapped)["myelin_failure"]
    assert (f.detail["op"], f.detail["function"], f.detail["source"]) == ("POW_F32", "lowerScalar", "ops.cpp:77")
    check = "layernorm_fusion.cpp:120: DCHECK(gamma_ && beta_) failed.\n"
    (f,) = _by_kind(check)["myelin_failure"]
    assert f.detail["source"] == "layernorm_fusion.cpp:120" and f.detail["check"] == "DCHECK(gamma_ && beta_)"


def test_plugin_not_found_names_the_node_from_the_parsers_dump() -> None:
    text = (
        "[E] [TRT] 3: getPluginCreator could not find plugin: GridSample version: 1\n"
        '[E] [TRT] ModelImporter.cpp:720: While parsing node number 7 [GridSample -> "out"]:\n'
        "[E] [TRT] ModelImporter.cpp:721: --- Begin node ---\n"
        '[E] [TRT] ModelImporter.cpp:722: input: "feat"\n'
        'output: "out"\nname: "grid_sampler_3"\nop_type: "GridSample"\n'
        'attribute {\n  name: "align_corners"\n  i: 0\n  type: INT\n}\n'
        "[E] [TRT] ModelImporter.cpp:723: --- End node ---\n"
        '[8] Assertion failed: creator && "Plugin not found, are the plugin name, version, and namespace correct?"\n'
    )
    (f,) = _by_kind(text)["plugin_not_found"]
    assert "grid_sampler_3" in f.layers and "align_corners" not in f.layers
    assert parse(text).unknown_lines == 0  # the dump's lines are read with the finding


def test_modelopt_console_without_time_and_its_command_options() -> None:
    text = (
        "$ python -m modelopt.onnx.quantization --onnx_path=bert.onnx --quantize_mode=int8 "
        "--calibration_method=entropy --output_path=out/bert.int8.onnx\n"
        "[modelopt][onnx] - INFO - Starting quantization process for model: bert.onnx\n"
        "[modelopt][onnx] - INFO - Quantization mode: int8\n"
        "[modelopt][onnx] - INFO - Model has dynamic inputs: ['input_ids', 'attention_mask']\n"
        "[modelopt][onnx] - INFO - No MHA partitions found in the model\n"
    )
    (q,) = _by_kind(text)["modelopt_quantization"]
    assert q.detail["dynamic_inputs"] == ["input_ids", "attention_mask"] and q.detail["mha_partitions"] == 0
    assert q.detail["calibration_method"] == "entropy" and q.detail["output_path"] == "out/bert.int8.onnx"
    assert "No MHA partitions found" in q.message and "calibration_method=entropy" in q.message
    assert "out/bert.int8.onnx" in q.message


def test_polygraphy_inspect_profiles_and_layers_per_profile_as_written() -> None:
    text = (
        "[I] ==== TensorRT Engine ====\n"
        "    Name: Unnamed Network 0 | Explicit Batch Engine\n"
        "    ---- 2 Profile(s) (3 Tensor(s) Each) ----\n"
        "    - Profile: 0\n"
        "        Tensor: images     (Input), Index: 0 | Shapes: min=(1, 3, 320, 320), opt=(4, 3, 640, 640), "
        "max=(8, 3, 640, 640)\n"
        "    - Profile: 1\n"
        "        Tensor: images     (Input), Index: 0 | Shapes: min=(1, 3, 640, 640), opt=(1, 3, 640, 640), "
        "max=(1, 3, 640, 640)\n"
        "    ---- 2 Layer(s) Per Profile ----\n"
        "    - Profile: 1\n"
        "        Layer 1    | /model.0/conv/Conv [profile 1] [Op: CaskConvolution]\n"
    )
    (ins,) = _by_kind(text)["polygraphy_inspect"]
    assert "2 Layer(s) Per Profile" in ins.message and "2 Profile(s) (3 Tensor(s) Each)" in ins.message
    assert (
        ins.detail["profile_shapes"]["0"]["images"]
        == "min=(1, 3, 320, 320), opt=(4, 3, 640, 640), max=(8, 3, 640, 640)"
    )
    (layer,) = ins.detail["layers"]
    assert (layer["index"], layer["profile"], layer["op"]) == (1, 1, "CaskConvolution")
    assert layer["as_written"] == "/model.0/conv/Conv [profile 1] [Op: CaskConvolution]" and "profile" not in {
        k for k in ins.detail if k != "profile_shapes"
    }


def test_polygraphy_build_profile_echo_with_tuples_and_several_inputs() -> None:
    text = (
        "[I] Configuring with profiles:[\n"
        "        Profile 0:\n"
        "            {latent [min=(1, 4, 64, 64), opt=(2, 4, 64, 64), max=(4, 4, 64, 64)],\n"
        "             text_embeds [min=(1, 77, 1024), opt=(2, 77, 1024), max=(4, 77, 1024)]}\n"
        "    ]\n"
    )
    (p,) = _by_kind(text)["optimization_profiles"]
    assert [x["name"] for x in p.detail["profiles"]] == ["latent", "text_embeds"]
    assert p.detail["profiles"][1]["max"] == "4, 77, 1024"
    assert "latent [min=(1, 4, 64, 64), opt=(2, 4, 64, 64), max=(4, 4, 64, 64)]" in p.message


def test_polygraphy_comparison_cut_before_its_error_metrics_is_reported_with_its_tolerance() -> None:
    text = (
        "[I]     Comparing Output: 'logits' (dtype=float32, shape=(1, 1000)) with 'logits' (dtype=float32, "
        "shape=(1, 1000))\n"
        "[I]         Tolerance: [abs=0.001, rel=0.001] | Checking elemwise error\n"
        "[I]         trt-runner-N0-01/02/25-10:00:00: logits | Stats: mean=0.1, std-dev=0.2, var=0.04, "
        "median=0.09, min=-1.5 at (0, 3), max=2.25 at (0, 7), avg-magnitude=0.3\n"
    )
    (f,) = _by_kind(text)["polygraphy_compare_no_verdict"]
    assert "tolerance [abs=0.001, rel=0.001]" in f.message and "cut before the error metrics" in f.message
    assert f.detail["runner_stats"]["trt-runner-N0-01/02/25-10:00:00"]["max"] == 2.25
    listed = (
        "1) [I]             Error Metrics: logits\n"
        "[I]                 Minimum Required Tolerance: elemwise error | [abs=0.5] OR [rel=inf]\n"
    )
    (f,) = _by_kind(listed)["polygraphy_compare_no_verdict"]
    assert f.detail["output"] == "logits" and "[abs=0.5] OR [rel=inf]" in f.message


def test_engine_files_named_by_a_command_a_listing_an_app_loader_or_trtllm_config() -> None:
    cmd = "./yolo_trt ./weights/yolov8s.plan ./bus.jpg\nEngine deserialization failed.\n"
    (e,) = _by_kind(cmd)["engine_file"]
    assert e.detail == {"path": "./weights/yolov8s.plan", "action": "command_line"}
    listing = "user@box:~/llm$ ls engines/\nrank0.engine  rank1.engine  config.json\n"
    paths = sorted(f.detail["path"] for f in _by_kind(listing)["engine_file"])
    assert paths == ["engines/rank0.engine", "engines/rank1.engine"]
    loader = "[info] loading engine from file: /models/depth_fp16.engine\n"
    (e,) = _by_kind(loader)["engine_file"]
    assert e.detail == {"path": "/models/depth_fp16.engine", "action": "loaded"}
    config = "[TRT-LLM] [I] Config saved to engines/gptj/fp16/2-gpu/config.json.\n"
    (e,) = _by_kind(config)["engine_file"]
    assert e.detail == {"path": "engines/gptj/fp16/2-gpu", "action": "engine_dir"}


def test_profile_violation_names_the_binding_as_tensorrt_does() -> None:
    text = (
        "[E] [TRT] 3: [executionContext.cpp::validateInputBindings::2083] Error Code 3: API Usage Error (Parameter "
        "check failed, condition: profileMaxDims.d[i] >= dimensions.d[i]. Supplied binding dimension [16,3] for "
        "bindings[2] exceed min ~ max range at index 0, maximum dimension in profile is 8, minimum dimension in "
        "profile is 1, but supplied dimension is 16.)\n"
    )
    (f,) = _by_kind(text)["profile_violation"]
    assert "input bindings[2] set to [16,3]" in f.message and f.detail["input"] == "2"


def test_tensorrt_rtx_command_without_banner_perf_totals_only_trtllm_and_torchtrt_times_as_written() -> None:
    (run,) = _by_kind("C:\\rtx> tensorrt_rtx.exe --onnx=unet.onnx --fp16\n")["rtx_run"]
    assert run.detail["model"] == "unet.onnx" and "model unet.onnx" in run.message
    totals = "[I] Total Host Walltime: 3.01 s\n[I] Total GPU Compute Time: 950 ms\n"
    (p,) = _by_kind(totals)["performance_summary"]
    assert p.detail == {"walltime_s": 3.01, "gpu_compute_total_s": 0.95, "cut_short": True}
    trtllm = "[TRT-LLM] [I] Total time of building all engines: 01:02:03\n"
    (t,) = _by_kind(trtllm)["trtllm_build_time"]
    assert "all engines 01:02:03 (3723 s)" in t.message and t.detail["total"] == "01:02:03"
    torch = (
        "INFO:torch_tensorrt._compile:ir was set to default, using dynamo as ir\n"
        "INFO:torch_tensorrt.dynamo.conversion._TRTInterpreter:TRT INetwork construction elapsed time: 0:00:01.250000\n"
    )
    found = _by_kind(torch)
    assert found["torchtrt_partition"][0].detail["ir"] == "dynamo"
    assert "INetwork built in 0:00:01.250000 (1.25 s)" in found["torchtrt_engine"][0].message
