# ruff: noqa: E501 -- the snippets keep the tools' long lines whole (a split line would test the wrap joiner)
"""Tool consoles beyond TensorRT's own logger (issue 39, items 1 and 3-8): each family on a snippet written in its
format, the source of the format named at each snippet. The ModelOpt consoles are real: tests/data/toolconsoles/
(made with make_modelopt_logs.py, ModelOpt 0.47.0 on CPU)."""

from __future__ import annotations

from pathlib import Path

from trtverify.buildlog.parser import parse, parse_file

CONSOLES = Path(__file__).resolve().parents[1] / "data" / "toolconsoles"


def _by_kind(text: str) -> dict:
    out: dict = {}
    for f in parse(text).findings:
        out.setdefault(f.kind, []).append(f)
    return out


# TensorRT-LLM: examples/models/core/commandr/README.md ("If the engines are built successfully, you will see output
# like"), tensorrt_llm/commands/build.py (`Total time of building all engines`), builder.py (`Build phase peak memory`)
TRTLLM = """\
[09/19/2024-03:34:30] [TRT] [I] Engine generation completed in 26.9495 seconds.
[09/19/2024-03:34:30] [TRT] [I] [MemUsageStats] Peak memory usage of TRT CPU/GPU memory allocators: CPU 4 MiB, GPU 70725 MiB
[09/19/2024-03:34:55] [TRT] [I] [MemUsageStats] Peak memory usage during Engine building and serialization: CPU: 176260 MiB
[09/19/2024-03:34:55] [TRT-LLM] [I] Total time of building Unnamed Network 0: 00:00:52
[09/19/2024-03:34:55] [TRT-LLM] [I] Timing cache serialized to model.cache
[09/19/2024-03:34:55] [TRT-LLM] [I] Build phase peak memory: 176257.29 MB, children: 17.65 MB
[09/19/2024-03:34:55] [TRT-LLM] [I] Serializing engine to trt_engines/command_r_v01/fp16/1-gpu/rank0.engine...
[09/19/2024-03:35:20] [TRT-LLM] [I] Engine serialized. Total time: 00:00:25
[09/19/2024-03:35:23] [TRT-LLM] [I] Total time of building all engines: 00:01:47
"""


def test_trtllm_build_time_peak_memory_and_engine_written():
    log = parse(TRTLLM)
    assert log.dialects.get("trtllm") == 6
    found = _by_kind(TRTLLM)
    (t,) = found["trtllm_build_time"]
    assert t.detail["total_s"] == 107 and t.detail["networks"] == {"Unnamed Network 0": 52}
    assert t.detail["serialization_s"] == 25 and "all engines 107 s" in t.message
    (m,) = found["build_peak_memory"]
    assert m.detail["allocator_gpu_mib"] == 70725 and m.detail["build_cpu_mib"] == 176260
    assert m.detail["build_phase_mib"] == 176257.29 and m.detail["children_mib"] == 17.65
    assert "GPU 70725 MiB" in m.message
    (e,) = found["engine_file"]
    assert e.detail == {"path": "trt_engines/command_r_v01/fp16/1-gpu/rank0.engine", "action": "saved"}
    assert t.detail["engine"] == "trt_engines/command_r_v01/fp16/1-gpu/rank0.engine"


def test_memory_shortfalls_and_tactic_skips_carry_their_sizes():
    # TensorRT 10 (a build log quoted in a public repository): request, skip, then the allocator's error
    trt10 = (
        "[03/13/2026-13:17:50] [TRT] [W] Requested amount of GPU memory (2833252352 bytes) could not be allocated. "
        "There may not be enough free memory for allocation to succeed.\n"
        "[03/13/2026-13:17:50] [TRT] [W] UNSUPPORTED_STATE: Skipping tactic 28 due to insufficient memory on requested "
        "size of 2833252352 detected for tactic 0x0000000204040736.\n"
        "[03/13/2026-13:17:50] [TRT] [E] [virtualMemoryBuffer.cpp::nvinfer1::StdVirtualMemoryBufferImpl::resizePhysical"
        "::154] Error Code 2: OutOfMemory (Requested size was 2833252352 bytes.)\n"
    )
    found = _by_kind(trt10)
    (short,) = found["memory_shortfall"]
    assert short.severity == "high" and short.count == 2 and short.detail["requested_bytes"] == 2833252352
    (skip,) = found["tactic_skipped_workspace"]
    assert skip.detail == {"requested_bytes": 2833252352, "tactic": "0x0000000204040736"}
    # TensorRT 8.x prints the device request before the skip (the misspelling is TensorRT's)
    trt8 = (
        "[W] [TRT] Tactic Device request: 4229MB Available: 3748MB. Device memory is insufficient to use tactic.\n"
        "[W] [TRT] Skipping tactic 3 due to insuficient memory on requested size of 4434452480 detected for tactic 4.\n"
    )
    (skip,) = _by_kind(trt8)["tactic_skipped_workspace"]
    assert skip.count == 1 and skip.detail["requested_bytes"] == 4434452480
    assert skip.detail["available_bytes"] == 3748 << 20 and "GiB available" in skip.message
    assert parse(trt8).unknown_lines == 0
    # PyTorch's allocator, in a Torch-TensorRT or TensorRT-LLM log
    torch_oom = (
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB (GPU 0; 23.65 GiB total capacity; "
        "20.10 GiB already allocated; 1.50 GiB free; 21.00 GiB reserved in total by PyTorch)\n"
    )
    (short,) = _by_kind(torch_oom)["memory_shortfall"]
    assert short.detail == {"requested_bytes": 2 << 30, "available_bytes": int(1.5 * (1 << 30))}


def test_tensorrt_rtx_run_version_options_and_runtime_cache():
    # the tensorrt_rtx CLI is trtexec's sibling: its banner is written here after trtexec's (`&&&& RUNNING
    # TensorRT.trtexec [TensorRT v100400] [b26] # trtexec ...`, no tensorrt_rtx console was found in public threads);
    # `Engine serialized to` and `Runtime cache written to` are the TensorRT-RTX quick start guide's expected output
    text = (
        "&&&& RUNNING TensorRT-RTX.tensorrt_rtx [TensorRT-RTX v10200] [b34] # tensorrt_rtx --onnx=resnet50/model.onnx "
        "--saveEngine=resnet_engine.trt --runtimeCacheFile=resnet.cache\n"
        "[I] Engine serialized to resnet_engine.trt\n"
        "[I] Runtime cache written to resnet.cache\n"
        "&&&& PASSED TensorRT-RTX.tensorrt_rtx [TensorRT-RTX v10200] [b34] # tensorrt_rtx --onnx=resnet50/model.onnx\n"
    )
    found = _by_kind(text)
    (run,) = found["rtx_run"]
    assert (
        run.detail["version"] == "1.2.0" and run.detail["build"] == 34 and run.detail["model"] == "resnet50/model.onnx"
    )
    assert (
        run.detail["engine_saved"] == "resnet_engine.trt"
        and run.detail["options"]["runtimeCacheFile"] == "resnet.cache"
    )
    assert run.detail["status"] == "PASSED"
    (cache,) = found["rtx_runtime_cache"]
    assert cache.detail["events"] == [{"action": "written", "path": "resnet.cache"}]
    (e,) = found["engine_file"]
    assert e.detail == {"path": "resnet_engine.trt", "action": "saved"}


def test_modelopt_quantization_console_real():
    log = parse_file(CONSOLES / "modelopt_int8_entropy.log")
    (q,) = [f for f in log.findings if f.kind == "modelopt_quantization"]
    d = q.detail
    assert (d["model"], d["mode"], d["calibration_method"]) == ("tiny.onnx", "int8", "entropy")
    assert (d["quantized_nodes"], d["nodes"], d["mha_partitions"], d["output"]) == (1, 12, 0, "tiny.int8.onnx")
    assert d["calibration_batches"] == 8 and d["calibrated_tensors"] == 2
    assert "calibration entropy" in q.message and "wrote tiny.int8.onnx" in q.message
    assert log.unknown_lines == 0
    other = parse_file(CONSOLES / "modelopt_int8_max_exclude.log")
    (q,) = [f for f in other.findings if f.kind == "modelopt_quantization"]
    assert q.detail["calibration_method"] == "max"


def test_modelopt_autocast_console_real():
    log = parse_file(CONSOLES / "modelopt_autocast_bf16_exclude.log")
    (q,) = [f for f in log.findings if f.kind == "modelopt_quantization"]
    assert q.detail["mode"] == "bf16" and q.detail["converted"] == "5/6" and q.detail["converted_pct"] == 83.33
    assert q.detail["kept_high_precision"] == ["/c2/Conv"] and q.layers == ("/c2/Conv",)
    assert q.detail["output"] == "tiny.bf16.onnx" and q.message.startswith("AutoCast: BF16")


def test_polygraphy_convert_inspect_and_profiles():
    # Polygraphy's util.save_file / load_file messages, its profile echo, and `polygraphy inspect model` of an engine
    # (tools/Polygraphy/examples/cli/inspect/02_inspecting_a_tensorrt_engine/README.md)
    text = """\
[I]     Configuring with profiles:[
            Profile 0:
                {X [min=[1, 2, 1, 1], opt=[1, 2, 3, 3], max=[1, 2, 5, 5]]}
        ]
[I] Loading tactic replay file from replay.json
[I] Saving engine to dynamic_identity.engine
[I] ==== TensorRT Engine ====
    Name: Unnamed Network 0 | Explicit Batch Engine (2 layers)

    ---- 1 Engine Input(s) ----
    {X [dtype=float32, shape=(1, 2, -1, -1)]}

    ---- 1 Engine Output(s) ----
    {Y [dtype=float32, shape=(1, 2, -1, -1)]}

    ---- Memory ----
    Device Memory: 0 bytes

    ---- 2 Profile(s) (2 Binding(s) Each) ----
"""
    found = _by_kind(text)
    (prof,) = found["optimization_profiles"]
    assert prof.detail["profiles"] == [{"name": "X", "min": "1, 2, 1, 1", "opt": "1, 2, 3, 3", "max": "1, 2, 5, 5"}]
    (art,) = found["polygraphy_artifact"]
    assert art.detail == {"what": "tactic replay file", "path": "replay.json", "action": "loaded"}
    (e,) = found["engine_file"]
    assert e.detail == {"path": "dynamic_identity.engine", "action": "saved"}
    (ins,) = found["polygraphy_inspect"]
    assert ins.detail["counts"] == {"layers": 2, "engine_inputs": 1, "engine_outputs": 1, "profiles": 2}
    assert ins.detail["name"] == "Unnamed Network 0" and ins.detail["device_memory_bytes"] == 0


def test_engine_version_mismatch_names_the_engine_both_tags_and_the_fix():
    # TensorRT 8.x runtime (stdArchiveReader) as Polygraphy shows it, after loading the engine's bytes
    text = (
        "[I] Loading bytes from /models/yolov8s.engine\n"
        "[E] 1: [stdArchiveReader.cpp::StdArchiveReader::40] Error Code 1: Serialization (Serialization assertion "
        "stdVersionRead == serializationVersion failed.Version tag does not match. Note: Current Version: 213, "
        "Serialized Engine Version: 232)\n"
        "[E] 4: [runtime.cpp::deserializeCudaEngine::50] Error Code 4: Internal Error (Engine deserialization failed.)\n"
    )
    (mm,) = _by_kind(text)["engine_version_mismatch"]
    assert mm.severity == "high"
    assert (mm.detail["runtime_tag"], mm.detail["engine_tag"]) == (213, 232)
    assert mm.detail["engine"] == "/models/yolov8s.engine" and "rebuild" in mm.detail["fix"]
    # TensorRT 7's wording, with both library versions
    old = (
        "[TensorRT] ERROR: INVALID_CONFIG: The engine plan file is not compatible with this version of TensorRT, "
        "expecting library version 7.1.3 got 7.2.1, please rebuild.\n"
    )
    (mm,) = _by_kind(old)["engine_version_mismatch"]
    assert (mm.detail["engine_version"], mm.detail["runtime_version"]) == ("7.2.1", "7.1.3")
    assert "(7.1.3)" in mm.detail["fix"]


def test_engine_files_missing_and_failed_loads_are_high():
    # DeepStream's nvinfer (tests/data/logcorpus/b/031 has the same line)
    text = "ERROR: Deserialize engine failed from file: /opt/models/yolov5.engine\n"
    (e,) = _by_kind(text)["engine_file"]
    assert e.severity == "high" and e.detail == {"path": "/opt/models/yolov5.engine", "action": "load_failed"}


def test_verbose_builder_fusions_profile_violations_plugins_and_myelin():
    # TensorRT 10 verbose fusion lines (tests/data/buildlogs/trt10_4_tactic_layers_alexnet_fuzzylabs.log's form)
    fusions = (
        "[11/01/2024-10:32:50] [V] [TRT] ConvReluFusion: Fusing /features/features.0/Conv with /features/features.1/Relu\n"
        "[11/01/2024-10:32:50] [V] [TRT] Fusing conv2 with relu2\n"
    )
    (fu,) = _by_kind(fusions)["layer_fusion"]
    assert fu.detail["fusions"] == [
        {"pass": "ConvReluFusion", "fused": ["/features/features.0/Conv", "/features/features.1/Relu"]},
        {"pass": None, "fused": ["conv2", "relu2"]},
    ]
    # the execution context's checks, TensorRT 8.x (setBindingDimensions) and 10.x (setInputShape)
    trt8 = (
        "[E] [TRT] 3: [executionContext.cpp::setBindingDimensions::969] Error Code 3: API Usage Error (Parameter check "
        "failed at: runtime/api/executionContext.cpp::setBindingDimensions::969, condition: profileMaxDims.d[i] >= "
        "dimensions.d[i]. Supplied binding dimension [1,3,720,1280] for bindings[0] exceed min ~ max range at index 2, "
        "maximum dimension in profile is 640, minimum dimension in profile is 320, but supplied dimension is 720.)\n"
    )
    (pv,) = _by_kind(trt8)["profile_violation"]
    assert (pv.detail["set"], pv.detail["max"], pv.detail["got"]) == ("1,3,720,1280", "640", "720")
    trt10 = (
        "[E] IExecutionContext::setInputShape: Error Code 3: API Usage Error (Parameter check failed, condition: "
        "engineDims.d[i] == dims.d[i]. Static dimension mismatch while setting input shape for images. Set dimensions "
        "are [1,3,1280,1280]. Expected dimensions are [1,3,640,640].)\n"
    )
    (pv,) = _by_kind(trt10)["profile_violation"]
    assert pv.layers == ("images",) and pv.detail["set"] == "1,3,1280,1280" and pv.detail["exp"] == "1,3,640,640"
    # mmdeploy's custom NMS plugin, not registered (open-mmlab/mmdeploy#65's title)
    (pl,) = _by_kind("[E] [TRT] INVALID_ARGUMENT: getPluginCreator could not find plugin TRTBatchedNMS version 1\n")[
        "plugin_not_found"
    ]
    assert pl.detail == {"plugin": "TRTBatchedNMS", "version": "1"}
    # a Myelin error naming its ForeignNode (TensorRT 8.6-10's `Error Code N: Myelin (...)` form)
    myelin = (
        "[E] [TRT] 1: [myelinBuilderUtils.cpp::operator()::371] Error Code 1: Myelin ([myelin_graph.h:attach:1135] "
        "MyelinCheckException: gvn_pass.cpp:331: CHECK(false) failed in ForeignNode[/attn/MatMul.../attn/Softmax])\n"
    )
    (my,) = _by_kind(myelin)["myelin_failure"]
    assert my.layers == ("/attn/MatMul.../attn/Softmax",)


def test_performance_summary_posted_with_blank_and_wrapped_lines():
    # trtexec 8.6-10's one-line summary, pasted with blank lines between its lines and one figure wrapped
    text = (
        "[I] === Performance summary ===\n"
        "[I] Throughput: 512.3 qps\n\n"
        "[I] Latency: min = 1.9 ms, max = 2.5 ms, mean = 1.95 ms, median = 1.94 ms, percentile(90%) = 2.0\n"
        "ms, percentile(95%) = 2.1 ms, percentile(99%) = 2.4 ms\n\n"
        "[I] GPU Compute Time: min = 1.8 ms, max = 2.2 ms, mean = 1.85 ms, median = 1.84 ms, percentile(99%) = 2.1 ms\n"
    )
    log = parse(text)
    (p,) = [f for f in log.findings if f.kind == "performance_summary"]
    assert p.detail["stats"]["latency"]["p99"] == 2.4 and p.detail["stats"]["latency"]["p95"] == 2.1
    assert "GPU compute mean 1.85 ms" in p.message and "throughput 512.3 qps" in p.message
    assert log.unknown_lines == 0
    cut = "[I] Throughput: 12.9 qps\n[I] Latency: min = 75.9 ms, max = 76.4 ms, mean = 76.3 ms, median = 76.3 ms\n"
    (p,) = [f for f in parse(cut).findings if f.kind == "performance_summary"]
    assert "cut short" in p.message and "no GPU compute" in p.message


def test_myelin_region_names_its_first_and_last_node_runner_and_errors():
    # TensorRT 8.6-10 verbose timing of a Myelin runner and the autotuner's failure inside its block
    # (tests/data/logcorpus/a/038's form, nodes renamed)
    text = (
        "[03/28/2024-13:05:46] [TRT] [V] =============== Computing costs for {ForeignNode[/enc/conv/Conv.../enc/main/Slice_2]}\n"
        "[03/28/2024-13:05:46] [TRT] [V] --------------- Timing Runner: {ForeignNode[/enc/conv/Conv.../enc/main/Slice_2]} (Myelin[0x80000023])\n"
        "[03/28/2024-13:05:53] [TRT] [E] 9: Skipping tactic 0x0000000000000000 due to exception [autotuner.cpp:get_best_tactics:1520] Autotuner: no tactics to implement operation:\n"
    )
    (reg,) = _by_kind(text)["myelin_region"]
    assert (reg.detail["first"], reg.detail["last"], reg.detail["runner"]) == (
        "/enc/conv/Conv",
        "/enc/main/Slice_2",
        "Myelin[0x80000023]",
    )
    assert reg.detail["errors"][0].startswith("9: Skipping tactic") and reg.layers == (
        "/enc/conv/Conv.../enc/main/Slice_2",
    )


def test_tool_kinds_are_registered_for_gates_and_families():
    # suites' fail_on and the corpus bench look kinds up in config.findings; each tools module declares its own
    from trtverify.buildlog import tools
    from trtverify.config.findings import FAMILIES, KINDS, TOOL_KINDS

    assert tools.KINDS == TOOL_KINDS
    assert all(KINDS[k] == c and FAMILIES[k] == f for k, (c, f) in TOOL_KINDS.items())


def test_inspect_engine_layers_with_their_precision_and_trtexec_engine_paths():
    # `polygraphy inspect model model.engine --show layers` (tools/inspect/subtool/model/text.py's layout)
    text = """\
[I] ==== TensorRT Engine ====
    Name: Unnamed Network 0 | Explicit Batch Engine (2 layers)

    ---- 2 Layer(s) ----
    Layer 0    | /conv/Conv [Op: CaskConvolution]
        {x [dtype=float32, shape=(1, 3, 224, 224)]}
         -> {/conv/Conv_output_0 [dtype=float16, shape=(1, 8, 224, 224)]}

    Layer 1    | /relu/Relu [Op: PointWiseV2]
        {/conv/Conv_output_0 [dtype=float16, shape=(1, 8, 224, 224)]}
         -> {y [dtype=float32, shape=(1, 8, 224, 224)]}
"""
    log = parse(text)
    (ins,) = [f for f in log.findings if f.kind == "polygraphy_inspect"]
    assert ins.detail["layers"] == [
        {"name": "/conv/Conv", "op": "CaskConvolution", "output_dtype": "float16"},
        {"name": "/relu/Relu", "op": "PointWiseV2", "output_dtype": "float32"},
    ]
    assert ins.detail["precision"] == {"float16": 1, "float32": 1} and log.unknown_lines == 0
    # trtexec names its engine only on its command line (tests/data/logcorpus/a/036's form)
    trtexec = "&&&& RUNNING TensorRT.trtexec [TensorRT v110000] [b114] # trtexec --loadEngine=sam3_fp16.plan\n"
    (e,) = _by_kind(trtexec)["engine_file"]
    assert e.detail == {"path": "sam3_fp16.plan", "action": "loading"}


def test_trtllm_profiler_memory_runtime_estimate_and_all_n_engines():
    # TensorRT-LLM 0.6-0.8's build.py output (examples/chatglm/README.md of that time: `Total time of building all 1
    # engines`, the profiler's [MemUsage] steps, the runtime memory estimate)
    text = """\
[12/26/2023-20:01:02] [TRT-LLM] [I] Activation memory size: 2062.03 MiB
[12/26/2023-20:01:02] [TRT-LLM] [I] Weights memory size: 11909.60 MiB
[12/26/2023-20:01:02] [TRT-LLM] [I] Max KV Cache memory size: 448.00 MiB
[12/26/2023-20:01:02] [TRT-LLM] [I] Estimated max memory usage on runtime: 14419.63 MiB
[12/26/2023-20:01:02] [TRT-LLM] [I] [MemUsage] Rank 0 Engine build - Allocated Memory: Host 12.1 (GiB) Device 4.0 (GiB)
[12/26/2023-20:01:08] [TRT-LLM] [I] [MemUsage] Rank 0 Engine serialized - Allocated Memory: Host 0.3352 (GiB) Device 3.5739 (GiB)
[12/26/2023-20:01:09] [TRT-LLM] [I] Total time of building all 1 engines: 00:01:14
"""
    found = _by_kind(text)
    (t,) = found["trtllm_build_time"]
    assert t.detail["total_s"] == 74 and "networks" not in t.detail
    (m,) = found["build_peak_memory"]
    assert m.detail["runtime_estimate_mib"] == 14419.63 and m.detail["runtime_weights_mib"] == 11909.6
    assert m.detail["trtllm_host_mib"] == round(12.1 * 1024, 2) and m.detail["trtllm_device_mib"] == 4096.0
    assert "engine estimated at 14419.6 MiB at runtime" in m.message
    assert parse(text).unknown_lines == 0


def test_profile_violation_tensorrt10_satisfy_profile_wrapped_as_posted():
    # TensorRT 10's setInputShape check, as a public report pasted it (broken over unindented lines)
    text = (
        "[TRT] [E] IExecutionContext::setInputShape: Error Code 3: API Usage Error\n"
        "(Parameter check failed, condition: satisfyProfile. Set dimension [1,1620]\n"
        "for tensor input_values does not satisfy any optimization profiles.\n"
        "Valid range for profile 0: [1,3240]..[1,12960].\n"
        "In setInputShape at runtime/api/executionContext.cpp:2372)\n"
    )
    log = parse(text)
    (pv,) = [f for f in log.findings if f.kind == "profile_violation"]
    assert pv.layers == ("input_values",) and pv.detail["set"] == "1,1620"
    assert (pv.detail["pmin"], pv.detail["pmax"]) == ("1,3240", "1,12960")
    assert "profile 0 allows [1,3240]..[1,12960]" in pv.message and log.unknown_lines == 0


def test_ultralytics_engine_export_and_load_lines_name_the_engine():
    # ultralytics/engine/exporter.py and nn/autobackend.py messages
    text = (
        "TensorRT: building FP16 engine as yolov8n.engine\n"
        "TensorRT: export success ✅ 120.3s, saved as 'yolov8n.engine' (13.6 MB)\n"
        "Loading yolov8n.engine for TensorRT inference...\n"
    )
    (e,) = _by_kind(text)["engine_file"]
    assert e.count == 3 and e.detail["path"] == "yolov8n.engine"
    assert [o["action"] for o in e.detail["occurrences"]] == ["building", "saved", "loaded"]
