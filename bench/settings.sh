# settings.sh: sourced by bench/record.sh and bench/gpu-run.sh, so that
# every record names the library settings its rates depend on in the same
# words. The sessions that recorded the CI-class results ran with
# OPENBLAS_CORETYPE=Haswell set, which halves OpenBLAS on that AMD EPYC
# against the AVX-512 kernels it picks by itself (118 against 225 GFLOP/s,
# sgemm n = 2048, one core).

# Prints "- environment: ..." for a record's header: the OPENBLAS_, GOTO_,
# OMP_, POCL_, CUDA_ and POAS_ variables set (POAS_PROFILE left out: the
# record shows the profile with the devices).
record_environment() {
  settings=$(env | grep -E '^(OPENBLAS|GOTO|OMP|POCL|CUDA|POAS)_' | grep -v '^POAS_PROFILE=' |
    LC_ALL=C sort | tr '\n' ' ')
  echo "- environment: ${settings:-none of OPENBLAS_*, GOTO_*, OMP_*, POCL_*, CUDA_*, POAS_* set}"
}
