/* A progress half of the wrong ABI major (2.0): every entry point libnrt_proxy.so resolves
 * exists, but nccom_abi_version() answers 0x20000, so the driver must refuse to load it. */
#include <stddef.h>
#include <stdint.h>

uint32_t nccom_abi_version(void) { return 0x00020000u; }
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
