// Oracle harness: runs TensorRT OSS's EfficientNMS kernels (v10.16) on a case file, writes the four outputs.
#include "common/bboxUtils.h"
#include "efficientNMSInference.h"
#include <cstdio>
#include <cuda_fp16.h>
#include <vector>
using namespace nvinfer1;
using namespace nvinfer1::plugin;
size_t nvinfer1::plugin::dataTypeSize(DataType t) { return t == DataType::kHALF ? 2 : 4; }

template <typename T> void* upload(std::vector<float> const& v, bool half)
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
    int32_t h[13];
    float p[2];
    fread(h, 4, 13, f);
    fread(p, 4, 2, f);
    int B = h[0], N = h[1], C = h[2], boxC = h[3], hasAnchors = h[4], anchorsB = h[5], half = h[6];
    EfficientNMSParameters param;
    param.numOutputBoxes = h[7];
    param.backgroundClass = h[8];
    param.scoreSigmoid = h[9];
    param.classAgnostic = h[10];
    param.boxCoding = h[11];
    param.numSelectedBoxes = h[12];
    param.scoreThreshold = p[0];
    param.iouThreshold = p[1];
    param.batchSize = B;
    param.numScoreElements = N * C;
    param.numClasses = C;
    param.numAnchors = N;
    param.numBoxElements = N * boxC * 4;
    param.shareLocation = boxC == 1;
    param.boxDecoder = hasAnchors;
    param.shareAnchors = anchorsB == 1;
    param.datatype = half ? DataType::kHALF : DataType::kFLOAT;
    std::vector<float> boxes(size_t(B) * N * boxC * 4), scores(size_t(B) * N * C), anchors(size_t(anchorsB) * N * 4);
    fread(boxes.data(), 4, boxes.size(), f);
    fread(scores.data(), 4, scores.size(), f);
    if (hasAnchors) fread(anchors.data(), 4, anchors.size(), f);
    fclose(f);
    void* dBoxes = upload<float>(boxes, half);
    void* dScores = upload<float>(scores, half);
    void* dAnchors = hasAnchors ? upload<float>(anchors, half) : nullptr;
    int M = param.numOutputBoxes;
    void *dNum, *dOutBoxes, *dOutScores, *dOutClasses, *ws;
    cudaMalloc(&dNum, B * 4);
    cudaMalloc(&dOutBoxes, size_t(B) * M * 4 * 4);
    cudaMalloc(&dOutScores, size_t(B) * M * 4);
    cudaMalloc(&dOutClasses, size_t(B) * M * 4);
    size_t wsSize = EfficientNMSWorkspaceSize(B, N * C, C, param.datatype);
    cudaMalloc(&ws, wsSize);
    pluginStatus_t st = EfficientNMSInference(
        param, dBoxes, dScores, dAnchors, dNum, dOutBoxes, dOutScores, dOutClasses, nullptr, ws, 0);
    cudaError_t e = cudaDeviceSynchronize();
    if (st != STATUS_SUCCESS || e != cudaSuccess)
    {
        fprintf(stderr, "failed: status %d, %s\n", int(st), cudaGetErrorString(e));
        return 1;
    }
    std::vector<int32_t> num(B), classes(size_t(B) * M);
    cudaMemcpy(num.data(), dNum, B * 4, cudaMemcpyDeviceToHost);
    cudaMemcpy(classes.data(), dOutClasses, classes.size() * 4, cudaMemcpyDeviceToHost);
    std::vector<float> ob = download(dOutBoxes, size_t(B) * M * 4, half);
    std::vector<float> os = download(dOutScores, size_t(B) * M, half);
    FILE* o = fopen(argv[2], "wb");
    fwrite(num.data(), 4, num.size(), o);
    fwrite(ob.data(), 4, ob.size(), o);
    fwrite(os.data(), 4, os.size(), o);
    fwrite(classes.data(), 4, classes.size(), o);
    fclose(o);
    return 0;
}
