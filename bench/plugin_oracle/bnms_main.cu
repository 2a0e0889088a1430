// Oracle harness: runs TensorRT OSS's BatchedNMS kernels (v10.16) on a case file, writes the four outputs.
#include "common/bboxUtils.h"
#include "common/kernels/kernel.h"
#include <cstdio>
#include <cuda_fp16.h>
#include <vector>
using namespace nvinfer1;
using namespace nvinfer1::plugin;
namespace nvinfer1
{
namespace plugin
{
pluginStatus_t nmsInference(cudaStream_t stream, const int N, const int perBatchBoxesSize, const int perBatchScoresSize,
    const bool shareLocation, const int backgroundLabelId, const int numPredsPerClass, const int numClasses,
    const int topK, const int keepTopK, const float scoreThreshold, const float iouThreshold, const DataType DT_BBOX,
    const void* locData, const DataType DT_SCORE, const void* confData, void* keepCount, void* nmsedBoxes,
    void* nmsedScores, void* nmsedClasses, void* workspace, bool isNormalized, bool confSigmoid, bool clipBoxes,
    int scoreBits, bool caffeSemantics);
}
} // namespace nvinfer1

void* upload(std::vector<float> const& v, bool half)
{
    void* d = nullptr;
    if (half)
    {
        std::vector<__half> h(v.size());
        for (size_t i = 0; i < v.size(); i++) h[i] = __float2half(v[i]);
        cudaMalloc(&d, h.size() * 2 + 16);
        cudaMemcpy(d, h.data(), h.size() * 2, cudaMemcpyHostToDevice);
    }
    else
    {
        cudaMalloc(&d, v.size() * 4 + 16);
        cudaMemcpy(d, v.data(), v.size() * 4, cudaMemcpyHostToDevice);
    }
    return d;
}

std::vector<float> download(void* d, size_t n, bool half)
{
    std::vector<float> out(n);
    if (half)
    {
        std::vector<__half> h(n);
        cudaMemcpy(h.data(), d, n * 2, cudaMemcpyDeviceToHost);
        for (size_t i = 0; i < n; i++) out[i] = __half2float(h[i]);
    }
    else
        cudaMemcpy(out.data(), d, n * 4, cudaMemcpyDeviceToHost);
    return out;
}

int main(int argc, char** argv)
{
    FILE* f = fopen(argv[1], "rb");
    int32_t h[12];
    float p[2];
    fread(h, 4, 12, f);
    fread(p, 4, 2, f);
    int B = h[0], N = h[1], C = h[2], boxC = h[3], half = h[4], bg = h[5], topK = h[6], keepTopK = h[7];
    bool normalized = h[8], clip = h[9], caffe = h[11];
    int scoreBits = h[10];
    std::vector<float> boxes(size_t(B) * N * boxC * 4), scores(size_t(B) * N * C);
    fread(boxes.data(), 4, boxes.size(), f);
    fread(scores.data(), 4, scores.size(), f);
    fclose(f);
    void* dBoxes = upload(boxes, half);
    void* dScores = upload(scores, half);
    void *dNum, *dOutBoxes, *dOutScores, *dOutClasses, *ws;
    size_t el = half ? 2 : 4;
    cudaMalloc(&dNum, B * 4);
    cudaMalloc(&dOutBoxes, size_t(B) * keepTopK * 4 * el);
    cudaMalloc(&dOutScores, size_t(B) * keepTopK * el);
    cudaMalloc(&dOutClasses, size_t(B) * keepTopK * el);
    cudaMemset(dOutBoxes, 0x7f, size_t(B) * keepTopK * 4 * el);  // what the kernel leaves unwritten shows
    cudaMemset(dOutScores, 0x7f, size_t(B) * keepTopK * el);
    cudaMemset(dOutClasses, 0x7f, size_t(B) * keepTopK * el);
    size_t wsSize = size_t(1) << 30;
    cudaMalloc(&ws, wsSize);
    DataType dt = half ? DataType::kHALF : DataType::kFLOAT;
    pluginStatus_t st = nmsInference(0, B, N * boxC * 4, N * C, boxC == 1, bg, N, C, topK, keepTopK, p[0], p[1], dt,
        dBoxes, dt, dScores, dNum, dOutBoxes, dOutScores, dOutClasses, ws, normalized, false, clip, scoreBits, caffe);
    cudaError_t e = cudaDeviceSynchronize();
    if (st != STATUS_SUCCESS || e != cudaSuccess)
    {
        fprintf(stderr, "failed: status %d, %s\n", int(st), cudaGetErrorString(e));
        return 1;
    }
    std::vector<int32_t> num(B);
    cudaMemcpy(num.data(), dNum, B * 4, cudaMemcpyDeviceToHost);
    std::vector<float> ob = download(dOutBoxes, size_t(B) * keepTopK * 4, half);
    std::vector<float> os = download(dOutScores, size_t(B) * keepTopK, half);
    std::vector<float> oc = download(dOutClasses, size_t(B) * keepTopK, half);
    FILE* o = fopen(argv[2], "wb");
    fwrite(num.data(), 4, num.size(), o);
    fwrite(ob.data(), 4, ob.size(), o);
    fwrite(os.data(), 4, os.size(), o);
    fwrite(oc.data(), 4, oc.size(), o);
    fclose(o);
    return 0;
}
