// Oracle harness: runs TensorRT OSS's ROIAlign kernel (v10.16) on a case file (float32), writes Y.
#include "roiAlignKernel.h"
#include <cstdio>
#include <vector>
template <typename T>
cudaError_t RoiAlignImpl(cudaStream_t stream, int32_t const maxThreadsPerBlock, T const* bottomData,
    T const spatialScale, int32_t const numRois, int32_t const channels, int32_t const height, int32_t const width,
    int32_t const pooledHeight, int32_t const pooledWidth, int32_t const samplingRatio, T const* bottomRois, T* topData,
    int32_t const isModeAvg, int32_t const* batchIndicesPtr, int32_t const aligned);
int main(int argc, char** argv)
{
    FILE* f = fopen(argv[1], "rb");
    int32_t h[10];
    float scale;
    fread(h, 4, 10, f);
    fread(&scale, 4, 1, f);
    int N = h[0], C = h[1], H = h[2], W = h[3], R = h[4], PH = h[5], PW = h[6], sr = h[7], avg = h[8], aligned = h[9];
    std::vector<float> x(size_t(N) * C * H * W), rois(size_t(R) * 4);
    std::vector<int32_t> bi(R);
    fread(x.data(), 4, x.size(), f);
    fread(rois.data(), 4, rois.size(), f);
    fread(bi.data(), 4, bi.size(), f);
    fclose(f);
    float *dx, *dr, *dy;
    int32_t* db;
    size_t ny = size_t(R) * C * PH * PW;
    cudaMalloc(&dx, x.size() * 4 + 16);
    cudaMalloc(&dr, rois.size() * 4 + 16);
    cudaMalloc(&db, bi.size() * 4 + 16);
    cudaMalloc(&dy, ny * 4 + 16);
    cudaMemcpy(dx, x.data(), x.size() * 4, cudaMemcpyHostToDevice);
    cudaMemcpy(dr, rois.data(), rois.size() * 4, cudaMemcpyHostToDevice);
    cudaMemcpy(db, bi.data(), bi.size() * 4, cudaMemcpyHostToDevice);
    cudaError_t e = RoiAlignImpl<float>(0, 1024, dx, scale, R, C, H, W, PH, PW, sr, dr, dy, avg, db, aligned);
    if (e == cudaSuccess) e = cudaDeviceSynchronize();
    if (e != cudaSuccess)
    {
        fprintf(stderr, "failed: %s\n", cudaGetErrorString(e));
        return 1;
    }
    std::vector<float> y(ny);
    cudaMemcpy(y.data(), dy, ny * 4, cudaMemcpyDeviceToHost);
    FILE* o = fopen(argv[2], "wb");
    fwrite(y.data(), 4, y.size(), o);
    fclose(o);
    return 0;
}
