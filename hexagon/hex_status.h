/* SPDX-License-Identifier: MIT */
/*
 * Status codes of the DSP side.  The values are those of comm_status_t (arcomm.h),
 * so a status read from a fence word means the same on the host; the DSP sources do
 * not include arcomm.h because they are also built freestanding for the DSP.
 */
#ifndef ARCOMM_HEX_STATUS_H
#define ARCOMM_HEX_STATUS_H

#define HEX_OK              0
#define HEX_ERR_INVALID     (-1) /* bad parameters (a host-side bug if ever seen) */
#define HEX_ERR_NOMEM       (-2) /* VTCM or a DMA queue too small for the parameters */
#define HEX_ERR_UNSUPPORTED (-3) /* dtype not built into this DSP image */
#define HEX_ERR_INTERNAL    (-4) /* a DSP-side failure (COMM_ERR_SYSTEM on the host) */
#define HEX_ERR_TIMEOUT     (-5) /* a peer session did not reach a fence in time */
#define HEX_ERR_PEER        (-6) /* a peer session wrote an error status */
#define HEX_ERR_ABORTED     (-8) /* the host cancelled the op (comm_abort) */

#endif /* ARCOMM_HEX_STATUS_H */
