# Sourced by the device scripts (scripts/device_sm90.sh, scripts/device_decode_check.sh): the
# output folder ($OUT on the GPU machine, else device-out), its summary.txt started empty,
# note() to print a line and add it to the summary, and gtest_src, the CMake flag that points
# at the GoogleTest carried in .device (scripts/prepare_device.sh), empty without it.
out=${OUT:-$PWD/device-out}
mkdir -p "$out"
summary="$out/summary.txt"
: > "$summary"
note() { echo "$*" | tee -a "$summary"; }
gtest_src=""
[ -d .device/googletest ] && gtest_src="-DFLASHATTN_GTEST_SOURCE_DIR=$PWD/.device/googletest"
