/*
 * One-line wrappers around the libfabric calls that the rdma headers defines `static inline`
 * (they dispatch through the ops tables of the fid objects, so libfabric.so does not export
 * them and Rust cannot link to them). Each `lfsys_X` has the signature of libfabric's `X` and
 * does nothing but call it; see the libfabric man page of `X` for its contract.
 */
#ifndef LIBFABRIC_SYS_SHIM_H
#define LIBFABRIC_SYS_SHIM_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_eq.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_tagged.h>

/** `fi_domain(3)`: opens a domain of `fabric` described by `info`. */
int lfsys_fi_domain(struct fid_fabric *fabric, struct fi_info *info,
		    struct fid_domain **domain, void *context);
/** `fi_endpoint(3)`: opens an active endpoint in `domain`. */
int lfsys_fi_endpoint(struct fid_domain *domain, struct fi_info *info,
		      struct fid_ep **ep, void *context);
/** `fi_av_open(3)`: opens an address vector. */
int lfsys_fi_av_open(struct fid_domain *domain, struct fi_av_attr *attr,
		     struct fid_av **av, void *context);
/** `fi_cq_open(3)`: opens a completion queue. */
int lfsys_fi_cq_open(struct fid_domain *domain, struct fi_cq_attr *attr,
		     struct fid_cq **cq, void *context);
/** `fi_control(3)` with `FI_GETWAIT`: the wait object of a CQ opened with `FI_WAIT_FD`, a
 * file descriptor, into `*fd`. */
int lfsys_fi_cq_getwait_fd(struct fid_cq *cq, int *fd);
/** `fi_trywait(3)` on one CQ: 0 when the caller may block on its wait object now, -FI_EAGAIN
 * when completions are already queued. */
int lfsys_fi_trywait_cq(struct fid_fabric *fabric, struct fid_cq *cq);
/** `fi_ep_bind(3)`: binds an AV or CQ (`bfid`) to `ep`. */
int lfsys_fi_ep_bind(struct fid_ep *ep, struct fid *bfid, uint64_t flags);
/** `fi_enable(3)`: enables an endpoint after its bindings. */
int lfsys_fi_enable(struct fid_ep *ep);
/** `fi_getname(3)`: copies the endpoint's address into `addr` (`*addrlen` in/out). */
int lfsys_fi_getname(struct fid *fid, void *addr, size_t *addrlen);
/** `fi_setname(3)`: sets the endpoint's address (before `fi_enable`; shm takes a string). */
int lfsys_fi_setname(struct fid *fid, void *addr, size_t addrlen);
/** `fi_av_insert(3)`: inserts `count` addresses into `av`, writing their `fi_addr_t`s. */
int lfsys_fi_av_insert(struct fid_av *av, const void *addr, size_t count,
		       fi_addr_t *fi_addr, uint64_t flags, void *context);
/** `fi_av_straddr(3)`: formats an address for logs. */
const char *lfsys_fi_av_straddr(struct fid_av *av, const void *addr, char *buf,
				size_t *len);
/** `fi_tsend(3)`: posts a tagged send. */
ssize_t lfsys_fi_tsend(struct fid_ep *ep, const void *buf, size_t len, void *desc,
		       fi_addr_t dest_addr, uint64_t tag, void *context);
/** `fi_tinject(3)` (`fi_tagged(3)`): a tagged send of at most `tx_attr->inject_size` bytes;
 *  the buffer is reusable when it returns and no completion is generated. */
ssize_t lfsys_fi_tinject(struct fid_ep *ep, const void *buf, size_t len,
			 fi_addr_t dest_addr, uint64_t tag);
/** `fi_trecv(3)`: posts a tagged receive. */
ssize_t lfsys_fi_trecv(struct fid_ep *ep, void *buf, size_t len, void *desc,
		       fi_addr_t src_addr, uint64_t tag, uint64_t ignore, void *context);
/** `fi_cancel(3)`: asks the provider to cancel the operation posted with `context`. */
ssize_t lfsys_fi_cancel(struct fid *fid, void *context);
/** `fi_cq_read(3)`: reads up to `count` completions in the CQ's format. */
ssize_t lfsys_fi_cq_read(struct fid_cq *cq, void *buf, size_t count);
/** `fi_cq_readerr(3)`: reads one error completion into `buf` (zero it first). */
ssize_t lfsys_fi_cq_readerr(struct fid_cq *cq, struct fi_cq_err_entry *buf, uint64_t flags);
/** `fi_cq_strerror(3)`: the provider's text for an error completion. */
const char *lfsys_fi_cq_strerror(struct fid_cq *cq, int prov_errno, const void *err_data,
				 char *buf, size_t len);
/** `fi_mr_reg(3)`: registers `buf..buf+len` with `domain`. */
int lfsys_fi_mr_reg(struct fid_domain *domain, const void *buf, size_t len, uint64_t access,
		    uint64_t offset, uint64_t requested_key, uint64_t flags,
		    struct fid_mr **mr, void *context);
/** `fi_mr_desc(3)`: the local descriptor of a registration (for `desc` arguments). */
void *lfsys_fi_mr_desc(struct fid_mr *mr);
/** `fi_mr_key(3)`: the remote key of a registration. */
uint64_t lfsys_fi_mr_key(struct fid_mr *mr);
/** `fi_mr_bind(3)`: binds a registration to an endpoint (`FI_MR_ENDPOINT` only). */
int lfsys_fi_mr_bind(struct fid_mr *mr, struct fid *bfid, uint64_t flags);
/** `fi_mr_enable(3)`: enables a registration after `fi_mr_bind` (`FI_MR_ENDPOINT` only). */
int lfsys_fi_mr_enable(struct fid_mr *mr);
/** `fi_close(3)`: closes any fabric object. */
int lfsys_fi_close(struct fid *fid);

#endif /* LIBFABRIC_SYS_SHIM_H */
