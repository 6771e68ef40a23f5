/* A progress half of the wrong ABI major (2.0): every entry point libnrt_proxy.so resolves
 * exists, but nccom_abi_version() answers 0x20000, so the driver must refuse to load it.
 * Built with -DFAKE_ABI=0x00010004u it is a progress half of ABI 1.4 instead, which the driver
 * loads, for the checks of what a newer minor added (tests/old_progress.rs); none of its stubs
 * may be reached there. */
#include <stddef.h>
#include <stdint.h>

#ifndef FAKE_ABI
#define FAKE_ABI 0x00020000u
#endif

uint32_t nccom_abi_version(void) { return FAKE_ABI; }
const char *nrt_get_status_as_str(uint32_t s) { (void)s; return "fake"; }
#define STUB(name) uint32_t name(void) { return 1u; }
STUB(neuronStartNetworkProxy)
STUB(neuronNetworkProxyProgress)
STUB(neuronStopNetworkProxy)
STUB(nccom_register_device_callbacks)
STUB(nccom_mem_group_create)
STUB(nccom_mem_group_destroy)
STUB(nccom_comm_create)
STUB(nccom_comm_destroy)
STUB(nccom_comm_register_memory)
