# gpulab in a container, in two stages:
#   build    NVIDIA's CUDA development image with cuDNN. It runs what CI runs:
#            scripts/install-deps.sh, the release preset (sm_80/86/89/90), and scripts/package.sh
#            (cmake --install, the find_package consumer test, the .deb, unpacked and run).
#   runtime  NVIDIA's CUDA runtime image with cuDNN, with only that .deb installed (apt resolves
#            its Depends:; `gpulab --version` then checks that every library it links loads), run
#            by an unprivileged user.
# Written for the base image tags below (README, "Docker"); CUDA 13.0 needs an NVIDIA driver >= 580.
#   docker build -t gpulab --build-arg GPULAB_GIT_COMMIT="$(git describe --always --dirty --abbrev=12 --exclude '*')" .
#   docker run --rm --gpus all gpulab gpulab doctor
#   docker run --rm --gpus all -v "$PWD/photos:/photos:ro" gpulab gpulab classify /photos
ARG CUDA_IMAGE_VERSION=13.0.0
ARG CUDA_IMAGE_OS=ubuntu24.04

FROM nvidia/cuda:${CUDA_IMAGE_VERSION}-cudnn-devel-${CUDA_IMAGE_OS} AS build
SHELL ["/bin/bash", "-o", "pipefail", "-c"]
WORKDIR /src
# The dependencies first, so that a change to the sources reuses this layer.
COPY scripts/install-deps.sh scripts/pip-requirements.txt scripts/
RUN bash scripts/install-deps.sh --no-python && rm -rf /var/lib/apt/lists/*
COPY . .
# .dockerignore leaves .git out: the commit that --version and every result record comes in here
# (cmake/write_git_commit.cmake reads GPULAB_GIT_COMMIT when there is no git checkout).
ARG GPULAB_GIT_COMMIT=unknown
ENV GPULAB_GIT_COMMIT=${GPULAB_GIT_COMMIT}
RUN cmake --preset release -DGPULAB_BUILD_TESTS=OFF \
    && cmake --build --preset release \
    && bash scripts/package.sh release \
    && cp build/release/packages/gpulab_*.deb /gpulab.deb

FROM nvidia/cuda:${CUDA_IMAGE_VERSION}-cudnn-runtime-${CUDA_IMAGE_OS} AS runtime
COPY --from=build /gpulab.deb /tmp/gpulab.deb
RUN apt-get update \
    && apt-get install -y --no-install-recommends /tmp/gpulab.deb \
    && rm -rf /var/lib/apt/lists/* /tmp/gpulab.deb \
    && gpulab --version \
    && useradd --create-home --shell /usr/sbin/nologin --uid 10001 gpulab
USER 10001
WORKDIR /home/gpulab
# Without arguments: the bundled MobileNetV2 on the bundled photos (/usr/share/gpulab).
CMD ["gpulab", "classify"]
