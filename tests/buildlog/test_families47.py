"""Issue 47's families: Triton Inference Server (and the TensorRT-LLM runtime its tensorrtllm backend runs), ONNX
Runtime's TensorRT and NV TensorRT RTX execution providers, DeepStream's nvinfer. Each fixture is a real snippet from
a public thread (tests/data/buildlogs/families47/README.md names each source); each test asserts the names and
numbers a reader came for, as the log writes them, in the finding's message and detail. The last tests use lines
written in the tools' own message templates (named in each) where no public log was found; the names and sizes in
them are not any fixture's, so a rule fitted to one log's values fails there."""

from __future__ import annotations

from pathlib import Path

from trtverify.buildlog.parser import parse, parse_file
from trtverify.buildlog.tools import registry
from trtverify.config.findings import FAMILIES, KINDS, TOOL_KINDS

DATA = Path(__file__).resolve().parents[1] / "data" / "buildlogs" / "families47"


def _kinds(name_or_text: str) -> dict:
    log = parse_file(DATA / name_or_text) if name_or_text.endswith(".log") else parse(name_or_text)
    out: dict = {}
    for f in log.findings:
        out.setdefault(f.kind, []).append(f)
    return out


def test_every_fixture_has_its_source_and_a_family_finding() -> None:
    readme = (DATA / "README.md").read_text(encoding="utf-8")
    ours = {k for k in registry.KINDS if k.startswith(("triton", "trtllm_runtime", "ort_ep", "deepstream"))}
    for path in sorted(DATA.glob("*.log")):
        assert f"`{path.name}`" in readme, path.name
        assert ours & set(_kinds(path.name)), path.name  # each snippet is read by its family
    assert all(KINDS[k] == TOOL_KINDS[k][0] and FAMILIES[k] == TOOL_KINDS[k][1] for k in ours)


# --- Triton ------------------------------------------------------------------------------------------------------


def test_triton_models_loaded_with_instances_gpu_and_profile() -> None:
    got = _kinds("triton_trt_instances_server7580.log")["triton_model"]
    by = {f.layers[0]: f for f in got}
    assert set(by) == {"vehicletypenet", "peopleNet", "trafficcamnet"}
    v = by["vehicletypenet"]
    assert v.severity == "info" and v.detail["state"] == "loaded"
    assert v.detail["instances"] == [{"name": "vehicletypenet_0_0", "device": "GPU", "gpu": 0, "profile": "default[0]"}]
    assert "'vehicletypenet'" in v.message and "GPU 0" in v.message and "default[0]" in v.message
    assert by["peopleNet"].detail["backend"] == "tensorrt"  # from tensorrt.cc's TRITONBACKEND_ModelInstanceInitialize


def test_triton_failed_load_states_model_version_status_and_reason() -> None:
    k = _kinds("triton_failed_gpu_only_server5863.log")
    (ocr,) = [f for f in k["triton_model"] if f.layers == ("ocr",)]
    assert ocr.severity == "high" and ocr.detail["version"] == "1" and ocr.detail["status"] == "Invalid argument"
    assert ocr.message == (
        "Triton failed to load 'ocr' version 1: Invalid argument: unable to load model 'ocr', TensorRT backend "
        "supports only GPU device"
    )
    (db,) = [f for f in k["triton_model"] if f.layers == ("db",)]
    assert db.detail["backend"] == "onnxruntime" and db.detail["instances"][0]["device"] == "CPU"
    (table,) = k["triton_model_status"]  # the backend table, its wrapped path cell joined
    assert table.detail["backends"] == {
        "onnxruntime": "/opt/tritonserver/backends/onnxruntime/libtriton_onnxruntime.so"
    }


def test_triton_engine_file_size_and_compute_capability_of_the_instance() -> None:
    (f,) = _kinds("triton_plan_cartoon_server5677.log")["triton_model"]
    assert f.layers == ("cartoon-logo-detector",)
    assert f.detail["engine"] == "model.plan" and f.detail["engine_size"] == "72 MiB"
    assert f.detail["engine_size_bytes"] == 72 << 20
    assert f.detail["instances"][0] == {"name": "cartoon-logo-detector_0_0", "device": "GPU", "gpu": 0,
                                        "compute_capability": "7.0"}  # fmt: skip
    assert "model.plan" in f.message and "72 MiB" in f.message


def test_triton_messages_glued_on_one_line_and_the_missing_backend_library() -> None:
    (f,) = _kinds("triton_glued_plan_backend_missing_server6541.log")["triton_model"]
    assert f.layers == ("laion_l14",) and f.severity == "high"
    assert f.detail["loading"] == ["1"] and f.detail["library"] == "libtriton_tensorrt_plan.so"
    assert "engine" not in f.detail  # a backend library is not an engine file
    assert "libtriton_tensorrt_plan.so" in f.message


def test_triton_status_table_names_each_model_not_ready() -> None:
    (f,) = _kinds("triton_status_table_unavailable_server5197.log")["triton_model_status"]
    assert f.severity == "high" and f.layers == ("densenet_onnx", "inception_graphdef")
    assert f.detail["models"][1] == {"model": "inception_graphdef", "version": "1", "status": (
        "UNAVAILABLE: Not found: model configuration is not provided for model 'inception_graphdef'")}  # fmt: skip
    assert "densenet_onnx 1: UNAVAILABLE: Internal: unable to create stream" in f.message


def test_triton_server_options_as_key_value_with_or_without_the_table_head() -> None:
    (f,) = _kinds("triton_options_table_server3609.log")["triton_server_options"]
    assert f.detail["options"] == {"server_id": "triton", "server_version": "2.13.0"}
    assert f.detail["server_version"] == "2.13.0" and "server_version 2.13.0" in f.message
    (g,) = _kinds("triton_options_rows_modelanalyzer1018.log")["triton_server_options"]
    assert g.detail["options"]["cuda_memory_pool_byte_size{0}"] == "67108864"
    assert g.detail["options"]["min_supported_compute_capability"] == "6.0" and len(g.detail["options"]) == 7


def test_trtis_servable_failure_with_the_plan_it_used() -> None:
    k = _kinds("trtis_plan_version_mismatch_server317.log")
    (f,) = k["triton_model"]
    assert f.layers == ("inception_plan",) and f.severity == "high"
    assert f.detail["reason"] == "Internal: unable to create TensorRT engine" and f.detail["engine"] == "model.plan"
    assert "engine_version_mismatch" in k  # TensorRT's own message beside it keeps its finding


def test_trtllm_runtime_kv_cache_as_written_and_in_bytes() -> None:
    (f,) = _kinds("triton_trtllm_kv_cache_tutorials150.log")["trtllm_runtime"]
    d = f.detail
    assert d["kv_cache"] == "78.30 GiB" and d["kv_cache_bytes"] == int(78.30 * (1 << 30))
    assert (d["kv_cache_tokens"], d["blocks_per_sequence"], d["tokens_per_block"]) == (3731744, 65, 32)
    assert (d["primary_blocks"], d["secondary_blocks"], d["window_size"]) == (116617, 0, 2051)
    assert "78.30 GiB" in f.message and "3731744 tokens" in f.message
    (g,) = _kinds("triton_trtllm_kv_bytes_backend361.log")["trtllm_runtime"]
    assert g.detail["kv_cache_bytes"] == 14575206400 and g.detail["kv_cache_tokens"] == 35584
    assert "14575206400 bytes" in g.message and "35584 tokens" in g.message
    (h,) = _kinds("triton_trtllm_ranks_backend396.log")["trtllm_runtime"]
    assert h.detail["engine_size"] == "3404 MiB" and h.detail["model"]["maxBatchSize"] == 1
    assert h.detail["rank_gpu"] == {"0": 0, "3": 3} and "rank 3 on GPU 3" in h.message


def test_triton_quoted_messages_of_newer_servers() -> None:
    k = _kinds("triton_trtllm_model_init_trtllm2233.log")
    (f,) = [x for x in k["triton_model"] if x.layers == ("tensorrt_llm",)]
    assert f.detail["backend"] == "tensorrtllm" and f.detail["version"] == "1" and f.detail["loading"] == ["1"]


def test_triton_verbose_model_configuration_version_policy() -> None:
    # Triton's --log-verbose print of the model configuration (model_config_utils.cc / the backends: one JSON key a
    # line, or the whole JSON escaped in one quoted message on newer servers); names and values are this test's own
    text = (
        "I0102 10:00:00.000001 7 tensorrt.cc:5100] model configuration:\n{\n"
        '    "name": "detr_fp16",\n    "platform": "tensorrt_plan",\n    "version_policy": {\n'
        '        "latest": {\n            "num_versions": 2\n        }\n    },\n    "max_batch_size": 16,\n'
        '    "default_model_filename": "detr.plan",\n}\n'
        "I0102 10:00:00.000002 7 tensorrt.cc:5234] TRITONBACKEND_ModelInstanceInitialize: detr_fp16_0_1 "
        "(GPU device 3)\n"
        'I0102 10:00:00.000003 7 model_config_utils.cc:680] "Server side auto-completed config: {\\n    \\"name\\": '
        '\\"ranker\\",\\n    \\"version_policy\\": {\\n        \\"specific\\": {\\n            \\"versions\\": [2, 5]'
        '\\n        }\\n    },\\n    \\"platform\\": \\"tensorrt_plan\\""\n'
    )
    by = {f.layers[0]: f for f in _kinds(text)["triton_model"]}
    d = by["detr_fp16"].detail
    assert (d["platform"], d["engine"], d["max_batch_size"]) == ("tensorrt_plan", "detr.plan", 16)
    assert d["version_policy"] == "latest num_versions: 2" and d["instances"][0]["gpu"] == 3
    assert "version policy latest num_versions: 2" in by["detr_fp16"].message
    assert by["ranker"].detail["version_policy"] == "specific versions: [2, 5]"


# --- ONNX Runtime's TensorRT execution providers -------------------------------------------------------------------


def test_ort_node_placement_per_provider_with_ops_and_names() -> None:
    (f,) = _kinds("ort_migraphx_placement_cpu_migraphx1641.log")["ort_ep_placement"]
    p = f.detail["providers"]
    assert p["MIGraphXExecutionProvider"]["nodes"] == 2 and p["CPUExecutionProvider"]["nodes"] == 39
    assert p["CPUExecutionProvider"]["ops"] == {"Gather": 1} and "Gather_1067" in f.layers
    assert "CPUExecutionProvider 39" in f.message and "Gather x1" in f.message
    (g,) = _kinds("ort_trt_ep_placement_ort17434.log")["ort_ep_placement"]  # markdown bold around the count
    assert g.detail["providers"]["TensorrtExecutionProvider"]["nodes"] == 11


def test_ort_all_nodes_on_tensorrt_in_three_versions_wording() -> None:
    for name, nodes in (("ort_trt_ep_all_nodes_ort26847.log", 1), ("ort_trt_ep_all_nodes_bold_ort17434c.log", 1),
                        ("ort_trt_ep_all_nodes_old_ort10110.log", None)):  # fmt: skip
        (f,) = _kinds(name)["ort_ep_placement"]
        trt = f.detail["providers"]["TensorrtExecutionProvider"]
        assert trt["all"] is True and trt["nodes"] == nodes and f.severity == "info", name
        assert "all nodes on TensorrtExecutionProvider" in f.message


def test_ort_provider_not_loaded_names_the_missing_library_and_the_fallback() -> None:
    (f,) = _kinds("ort_trt_ep_libnvinfer_missing_deface53.log")["ort_ep_unavailable"]
    d = f.detail
    assert f.severity == "high" and d["provider"] == "TensorrtExecutionProvider"
    assert d["missing_library"] == "libnvinfer.so.8" and d["library"] == "libonnxruntime_providers_tensorrt.so"
    assert (
        d["fallback"] == ["CUDAExecutionProvider", "CPUExecutionProvider"]
        and d["running_on"] == "CUDAExecutionProvider"
    )
    assert d["requested"][0] == "TensorrtExecutionProvider" and len(d["requested"]) == 4
    assert "libnvinfer.so.8 is missing" in f.message and "fell back to CUDAExecutionProvider" in f.message
    (w,) = _kinds("ort_trt_ep_dll_fallback_cuda_ort17394.log")["ort_ep_unavailable"]
    assert w.detail["error_code"] == 126 and w.detail["library"].endswith("onnxruntime_providers_tensorrt.dll")
    assert "(error 126)" in w.message
    (c,) = _kinds("ort_trt_ep_create_failed_ort13501.log")["ort_ep_unavailable"]
    assert c.detail["provider"] == "TensorrtExecutionProvider" and "failed to create" in c.message
    (p,) = _kinds("ort_trt_ep_plugins_libraries_missing_ort22139.log")["ort_ep_unavailable"]
    assert "TensorRT libraries were not found" in p.message


def test_ort_not_preferred_warning_is_a_placement_finding() -> None:
    (f,) = _kinds("ort_not_preferred_warning_ecosystem231.log")["ort_ep_placement"]
    assert f.detail["not_preferred"] is True and f.lines == (3,)
    assert "some nodes not on the preferred providers" in f.message


def test_ort_provider_options_key_value_with_the_cache_path() -> None:
    (f,) = _kinds("ort_trt_ep_provider_options_ort18272.log")["ort_ep_options"]
    o = f.detail["options"]
    assert (o["trt_fp16_enable"], o["trt_int8_enable"], o["trt_engine_cache_enable"]) == ("0", "0", "1")
    assert o["trt_max_workspace_size"] == "1073741824" and o["trt_builder_optimization_level"] == "3"
    assert f.detail["cache_path"].endswith("cvn_cache\\2beba869a9eb439b3c12a6bb70db02bc7d92381d")
    assert "trt_engine_cache_enable 1" in f.message and "trt_cache_path C:\\ProgramData" in f.message


def test_ort_trt_ep_cache_files_profile_warnings_and_engine_failures() -> None:
    # tensorrt_execution_provider.cc's VERBOSE cache lines (`[TensorRT EP] Serialized ` + path, `DeSerialized `,
    # `Serialized timing cache `, `Deserialized timing cache from `), the NV TensorRT RTX EP's warning and error
    # templates; the paths and node names are this test's own
    text = (
        "2025-03-01 10:00:00.1 [V:onnxruntime:, tensorrt_execution_provider.cc:3100 operator()] [TensorRT EP] "
        "DeSerialized /srv/cache/TensorrtExecutionProvider_TRTKernel_graph_main_991_0_0_fp16_sm89.engine\n"
        "2025-03-01 10:00:00.2 [V:onnxruntime:, tensorrt_execution_provider.cc:3200 operator()] [TensorRT EP] "
        "Deserialized timing cache from /srv/cache/TensorrtExecutionProvider_cache_sm89.timing\n"
        "2025-03-01 10:00:00.3 [V:onnxruntime:, tensorrt_execution_provider.cc:3300 operator()] [TensorRT EP] "
        "Serialized /srv/cache/TensorrtExecutionProvider_TRTKernel_graph_main_991_1_1_fp16_sm89.engine\n"
        "2025-03-01 10:00:00.4 [W:onnxruntime:, nv_execution_provider.cc:900 ApplyProfileShapesFromProviderOptions] "
        "[NvTensorRTRTX EP] Number of optimization profiles should be greater than 0, but it's 0.\n"
        "2025-03-01 10:00:00.5 [E:onnxruntime:, inference_session.cc:2100 operator()] [NvTensorRTRTX EP] Failed to "
        "create serialized engine for fused node: NvTensorRTRTXExecutionProvider_main_4412_0_0\n"
    )
    k = _kinds(text)
    (c,) = k["ort_ep_cache"]
    assert [(x["kind"], x["action"]) for x in c.detail["files"]] == [
        ("engine", "read"), ("timing_cache", "read"), ("engine", "written")]  # fmt: skip
    assert c.detail["files"][1]["path"] == "/srv/cache/TensorrtExecutionProvider_cache_sm89.timing"
    assert "_fp16_sm89.engine" in c.message and ".timing" in c.message
    (p,) = k["ort_ep_profile"]
    assert p.severity == "medium" and p.detail["ep"] == "NvTensorRTRTX"
    (e,) = k["ort_ep_error"]
    assert e.severity == "high" and e.layers == ("NvTensorRTRTXExecutionProvider_main_4412_0_0",)


# --- DeepStream nvinfer --------------------------------------------------------------------------------------------


def test_deepstream_deserialized_engine_and_its_binding_table() -> None:
    (f,) = _kinds("deepstream_deserialized_implicit_dsyolo27.log")["deepstream_engine"]
    d = f.detail
    assert d["engine"] == "/home/aaeon/sdcard/fogsphere-edge/fogsphere-engine-py/model_b2_gpu0_fp16.engine"
    assert (d["engine_batch"], d["engine_gpu"], d["engine_precision"]) == (2, 0, "fp16")
    assert d["element"] == "nvinfer0" and d["uid"] == 1 and d["batch_mode"] == "implicit" and d["layers_num"] == 4
    assert d["bindings"][0] == {"index": 0, "io": "INPUT", "dtype": "kFLOAT", "name": "data", "dims": "3x640x640"}
    assert [b["name"] for b in d["bindings"]] == ["data", "yolo_93", "yolo_96", "yolo_99"]
    assert "deserialized /home/aaeon" in f.message and "input data kFLOAT 3x640x640" in f.message
    assert f.lines == (5,) and parse_file(DATA / "deepstream_deserialized_implicit_dsyolo27.log").unknown_lines <= 4


def test_deepstream_engine_looked_for_and_not_found_then_rebuilt() -> None:
    k = _kinds("deepstream_int8_engine_missing_rebuild_dsyolo409.log")
    (f,) = k["deepstream_engine"]
    path = "/home/Documents/Dev/DeepStream-Yolo/model_b1_gpu0_int8.engine"
    assert [e["action"] for e in f.detail["engines"]] == ["not_found", "deserialize_failed", "deserialize_failed"]
    assert (
        f.detail["engine"] == path and f.detail["engine_precision"] == "int8" and f.detail["element"] == "primary_gie"
    )
    assert f"engine {path} not loaded" in f.message
    (old,) = _kinds("deepstream4_engine_read_failed_dsonnx7.log")["deepstream_engine"]  # DeepStream 4's wording
    assert old.detail["element"] == "primary_gie_classifier" and old.detail["built_from_model"] is True
    (tao,) = _kinds("deepstream_tao_etlt_engine_open_error_taoapps93.log")["deepstream_engine"]
    assert tao.detail["engine_batch"] == 16 and tao.detail["engine_precision"] == "int8"


def test_deepstream_missing_calibration_table_and_failed_build() -> None:
    k = _kinds("deepstream_calib_missing_build_failed_dsyolo252.log")
    (cal,) = k["deepstream_calibration"]
    assert (
        cal.severity == "medium"
        and cal.detail["path"] == "/mnt/sd/workspace/customer/seeed/DeepStream-Yolo/calib.table"
    )
    assert "calib.table does not exist" in cal.message
    (f,) = k["deepstream_engine"]
    assert f.severity == "high" and "build engine file failed" in f.detail["errors"]
    assert "Failed to build CUDA engine on yolov5s.cfg" in f.message


def test_deepstream_binding_table_without_its_element_line() -> None:
    (f,) = _kinds("deepstream_implicit_table_dsyolo73.log")["deepstream_engine"]
    assert f.detail["layers_num"] == 3 and [b["dims"] for b in f.detail["bindings"]] == ["3x320x320", "18x10x10",
                                                                                     "18x20x20"]  # fmt: skip


def test_deepstream_full_dims_table_custom_lib_calibration_and_batch() -> None:
    # nvdsinfer_model_builder.cpp's `[FullDims Engine Info]` rows with min / opt / max, nvdsinfer_context_impl.cpp's
    # `Could not open custom lib: %s` (dlerror) and `Backend has maxBatchSize %d whereas %d has been requested`,
    # `INT8 calibration file not specified. Trying FP16 mode.`, gstnvinfer_impl.cpp's `Load new model:%s sucessfully`;
    # the names, sizes and paths are this test's own
    text = (
        "0:00:01.1 9 0x1 INFO nvinfer gstnvinfer.cpp:682:gst_nvinfer_logger:<sgie_plates> NvDsInferContext[UID 4]: "
        "Info from NvDsInferContextImpl::deserializeEngineAndBackend() <nvdsinfer_context_impl.cpp:2092> [UID = 4]: "
        "deserialized trt engine from :/opt/models/lpr.onnx_b8_gpu1_fp16.engine\n"
        "INFO: ../nvdsinfer/nvdsinfer_model_builder.cpp:610 [FullDims Engine Info]: layers num: 2\n"
        "0   INPUT  kFLOAT image_input     3x48x96         min: 1x3x48x96       opt: 8x3x48x96       Max: 8x3x48x96\n"
        "1   OUTPUT kINT32 tf_op_layer_ArgMax 24              min: 0               opt: 0               Max: 0   \n"
        "\n"
        "0:00:01.2 9 0x1 WARN nvinfer gstnvinfer.cpp:679:gst_nvinfer_logger:<sgie_plates> NvDsInferContext[UID 4]: "
        "Warning from NvDsInferContextImpl::checkBackendParams() <nvdsinfer_context_impl.cpp:1800> [UID = 4]: "
        "Backend has maxBatchSize 8 whereas 16 has been requested\n"
        "0:00:01.3 9 0x1 WARN nvinfer gstnvinfer.cpp:679:gst_nvinfer_logger:<pgie> NvDsInferContext[UID 1]: "
        "Warning from NvDsInferContextImpl::buildModel() <nvdsinfer_context_impl.cpp:1900> [UID = 1]: "
        "INT8 calibration file not specified. Trying FP16 mode.\n"
        "0:00:01.4 9 0x1 ERROR nvinfer gstnvinfer.cpp:676:gst_nvinfer_logger:<pgie> NvDsInferContext[UID 1]: "
        "Error in NvDsInferContextImpl::initialize() <nvdsinfer_context_impl.cpp:1200> [UID = 1]: Could not open "
        "custom lib: libcustom_parser_v2.so: cannot open shared object file: No such file or directory\n"
        "0:00:01.5 9 0x1 INFO nvinfer gstnvinfer_impl.cpp:328:notifyLoadModelStatus:<sgie_plates> [UID 4]: Load new "
        "model:configs/sgie_lpr.txt sucessfully\n"
    )
    k = _kinds(text)
    by = {f.detail["uid"]: f for f in k["deepstream_engine"]}
    s = by[4].detail
    assert s["batch_mode"] == "full_dims" and s["bindings"][0]["max"] == "8x3x48x96"
    assert s["bindings"][1]["name"] == "tf_op_layer_ArgMax" and s["bindings"][1]["dtype"] == "kINT32"
    assert (s["max_batch_size"], s["batch_size_requested"], s["config"]) == (8, 16, "configs/sgie_lpr.txt")
    assert by[4].severity == "medium" and "engine max batch size 8 < 16 requested" in by[4].message
    assert (s["engine_batch"], s["engine_gpu"]) == (8, 1)
    (lib,) = k["deepstream_custom_lib"]
    assert lib.severity == "high" and lib.detail["library"] == "libcustom_parser_v2.so" and "pgie" in lib.message
    (cal,) = k["deepstream_calibration"]
    assert cal.detail["state"] == "not_specified_fp16" and "FP16 used instead" in cal.message


def test_deepstream_model_file_not_found_and_the_elements_own_errors() -> None:
    # nvdsinfer_model_builder.cpp's `Cannot access ONNX file '%s'` and `failed to build network since parsing model
    # errors.`, the context's printError without the source location, gstnvinfer.cpp's element errors (`<elem>
    # error: Failed to create NvDsInferContext instance`, `Config file path: %s, NvDsInfer Error: %s`); own names
    text = (
        "ERROR: Cannot access ONNX file '/models/vehicle_color_v3.onnx'\n"
        "ERROR: failed to build network since parsing model errors.\n"
        "NvDsInferContext[UID 7]: Error in NvDsInferContextImpl::buildModel(): build engine file failed\n"
        "0:00:00.9 11 0x5 WARN nvinfer gstnvinfer.cpp:898:gst_nvinfer_start:<color_sgie> error: Failed to create "
        "NvDsInferContext instance\n"
        "0:00:00.9 11 0x5 WARN nvinfer gstnvinfer.cpp:898:gst_nvinfer_start:<color_sgie> error: Config file path: "
        "/cfg/sgie_color.yml, NvDsInfer Error: NVDSINFER_CONFIG_FAILED\n"
    )
    (f,) = _kinds(text)["deepstream_engine"]
    d = f.detail
    assert f.severity == "high" and f.lines == (1,) and d["uid"] == 7
    assert d["model_file"] == "/models/vehicle_color_v3.onnx" and d["config"] == "/cfg/sgie_color.yml"
    assert d["errors"][-2:] == ["Failed to create NvDsInferContext instance", "NVDSINFER_CONFIG_FAILED"]
    assert "cannot access ONNX file /models/vehicle_color_v3.onnx" in f.message
