/* One-line wrappers of libfabric's static inline calls; see shim.h. */
#include "shim.h"

int lfsys_fi_domain(struct fid_fabric *fabric, struct fi_info *info,
		    struct fid_domain **domain, void *context)
{ return fi_domain(fabric, info, domain, context); }

int lfsys_fi_endpoint(struct fid_domain *domain, struct fi_info *info,
		      struct fid_ep **ep, void *context)
{ return fi_endpoint(domain, info, ep, context); }

int lfsys_fi_av_open(struct fid_domain *domain, struct fi_av_attr *attr,
		     struct fid_av **av, void *context)
{ return fi_av_open(domain, attr, av, context); }

int lfsys_fi_cq_open(struct fid_domain *domain, struct fi_cq_attr *attr,
		     struct fid_cq **cq, void *context)
{ return fi_cq_open(domain, attr, cq, context); }

int lfsys_fi_ep_bind(struct fid_ep *ep, struct fid *bfid, uint64_t flags)
{ return fi_ep_bind(ep, bfid, flags); }

int lfsys_fi_enable(struct fid_ep *ep)
{ return fi_enable(ep); }

int lfsys_fi_getname(struct fid *fid, void *addr, size_t *addrlen)
{ return fi_getname(fid, addr, addrlen); }

int lfsys_fi_setname(struct fid *fid, void *addr, size_t addrlen)
{ return fi_setname(fid, addr, addrlen); }

int lfsys_fi_av_insert(struct fid_av *av, const void *addr, size_t count,
		       fi_addr_t *fi_addr, uint64_t flags, void *context)
{ return fi_av_insert(av, addr, count, fi_addr, flags, context); }

const char *lfsys_fi_av_straddr(struct fid_av *av, const void *addr, char *buf,
				size_t *len)
{ return fi_av_straddr(av, addr, buf, len); }

ssize_t lfsys_fi_tsend(struct fid_ep *ep, const void *buf, size_t len, void *desc,
		       fi_addr_t dest_addr, uint64_t tag, void *context)
{ return fi_tsend(ep, buf, len, desc, dest_addr, tag, context); }

ssize_t lfsys_fi_tinject(struct fid_ep *ep, const void *buf, size_t len,
			 fi_addr_t dest_addr, uint64_t tag)
{ return fi_tinject(ep, buf, len, dest_addr, tag); }

ssize_t lfsys_fi_trecv(struct fid_ep *ep, void *buf, size_t len, void *desc,
		       fi_addr_t src_addr, uint64_t tag, uint64_t ignore, void *context)
{ return fi_trecv(ep, buf, len, desc, src_addr, tag, ignore, context); }

ssize_t lfsys_fi_cancel(struct fid *fid, void *context)
{ return fi_cancel(fid, context); }

ssize_t lfsys_fi_cq_read(struct fid_cq *cq, void *buf, size_t count)
{ return fi_cq_read(cq, buf, count); }

ssize_t lfsys_fi_cq_readerr(struct fid_cq *cq, struct fi_cq_err_entry *buf, uint64_t flags)
{ return fi_cq_readerr(cq, buf, flags); }

const char *lfsys_fi_cq_strerror(struct fid_cq *cq, int prov_errno, const void *err_data,
				 char *buf, size_t len)
{ return fi_cq_strerror(cq, prov_errno, err_data, buf, len); }

int lfsys_fi_mr_reg(struct fid_domain *domain, const void *buf, size_t len, uint64_t access,
		    uint64_t offset, uint64_t requested_key, uint64_t flags,
		    struct fid_mr **mr, void *context)
{ return fi_mr_reg(domain, buf, len, access, offset, requested_key, flags, mr, context); }

void *lfsys_fi_mr_desc(struct fid_mr *mr)
{ return fi_mr_desc(mr); }

uint64_t lfsys_fi_mr_key(struct fid_mr *mr)
{ return fi_mr_key(mr); }

int lfsys_fi_mr_bind(struct fid_mr *mr, struct fid *bfid, uint64_t flags)
{ return fi_mr_bind(mr, bfid, flags); }

int lfsys_fi_mr_enable(struct fid_mr *mr)
{ return fi_mr_enable(mr); }

int lfsys_fi_close(struct fid *fid)
{ return fi_close(fid); }

int lfsys_fi_cq_getwait_fd(struct fid_cq *cq, int *fd)
{ return fi_control(&cq->fid, FI_GETWAIT, fd); }

int lfsys_fi_trywait_cq(struct fid_fabric *fabric, struct fid_cq *cq)
{
	struct fid *fids[1] = { &cq->fid };
	return fi_trywait(fabric, fids, 1);
}
