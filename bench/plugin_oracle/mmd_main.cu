// Oracle harness: runs mmdeploy's TRTBatchedNMS kernels on a case file (float32), writes dets, labels, index.
#include "nms/batched_nms_kernel.hpp"
#include <cstdio>
#include <vector>

int main(int argc, char** argv)
{
    FILE* f = fopen(argv[1], "rb");
    int32_t h[8];
    float p[2];
    fread(h, 4, 8, f);
    fread(p, 4, 2, f);
    int B = h[0], N = h[1], C = h[2], boxC = h[3], bg = h[4], topKAttr = h[5], keepTopK = h[6];
    bool normalized = h[7] & 1, clip = (h[7] >> 1) & 1;
    std::vector<float> boxes(size_t(B) * N * boxC * 4), scores(size_t(B) * N * C);
    fread(boxes.data(), 4, boxes.size(), f);
    fread(scores.data(), 4, scores.size(), f);
    fclose(f);
    void *dBoxes, *dScores, *dDets, *dLabels, *dIndex, *ws;
    cudaMalloc(&dBoxes, boxes.size() * 4 + 16);
    cudaMalloc(&dScores, scores.size() * 4 + 16);
    cudaMemcpy(dBoxes, boxes.data(), boxes.size() * 4, cudaMemcpyHostToDevice);
    cudaMemcpy(dScores, scores.data(), scores.size() * 4, cudaMemcpyHostToDevice);
    cudaMalloc(&dDets, size_t(B) * keepTopK * 5 * 4);
    cudaMalloc(&dLabels, size_t(B) * keepTopK * 4);
    cudaMalloc(&dIndex, size_t(B) * keepTopK * 4);
    cudaMemset(dDets, 0x7f, size_t(B) * keepTopK * 5 * 4);  // what the kernel leaves unwritten shows
    cudaMemset(dLabels, 0x7f, size_t(B) * keepTopK * 4);
    cudaMemset(dIndex, 0x7f, size_t(B) * keepTopK * 4);
    cudaMalloc(&ws, size_t(1) << 30);
    // as TRTBatchedNMS::enqueue: topk = param.topK if 0 < topK <= N else N
    int topk = topKAttr > 0 && topKAttr <= N ? topKAttr : N;
    pluginStatus_t st = nmsInference(0, B, N * boxC * 4, N * C, boxC == 1, bg, N, C, topk, keepTopK, p[0], p[1],
        nvinfer1::DataType::kFLOAT, dBoxes, nvinfer1::DataType::kFLOAT, dScores, dDets, dLabels, dIndex, ws,
        normalized, false, clip, false);
    cudaError_t e = cudaDeviceSynchronize();
    if (st != STATUS_SUCCESS || e != cudaSuccess)
    {
        fprintf(stderr, "failed: status %d, %s\n", int(st), cudaGetErrorString(e));
        return 1;
    }
    std::vector<float> dets(size_t(B) * keepTopK * 5);
    std::vector<int32_t> labels(size_t(B) * keepTopK), index(size_t(B) * keepTopK);
    cudaMemcpy(dets.data(), dDets, dets.size() * 4, cudaMemcpyDeviceToHost);
    cudaMemcpy(labels.data(), dLabels, labels.size() * 4, cudaMemcpyDeviceToHost);
    cudaMemcpy(index.data(), dIndex, index.size() * 4, cudaMemcpyDeviceToHost);
    FILE* o = fopen(argv[2], "wb");
    fwrite(dets.data(), 4, dets.size(), o);
    fwrite(labels.data(), 4, labels.size(), o);
    fwrite(index.data(), 4, index.size(), o);
    fclose(o);
    return 0;
}
