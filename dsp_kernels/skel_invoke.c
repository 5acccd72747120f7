/* skel_invoke.c: the FastRPC entry of the skel when it is built without the Hexagon SDK
 * (the SDK build uses qaic's iface_skel.c, generated from iface.idl). It unpacks an
 * invoke as qaic lays out these methods (fastrpc_abi.h) and calls skel.c; the host side
 * that produces this layout is runtime/backends/dsp_fastrpc.py. */
#include "fastrpc_abi.h"

static int buffers(uint32_t sc, remote_arg *args, uint32_t in_min, uint32_t in_bytes,
                   uint32_t out_bytes)
{
    if (REMOTE_SCALARS_INBUFS(sc) != 1 || REMOTE_SCALARS_OUTBUFS(sc) != 1) return AEE_EBADPARM;
    if (args[0].buf.nLen < in_min || args[0].buf.nLen < in_bytes) return AEE_EBADPARM;
    if (args[1].buf.nLen < out_bytes) return AEE_EBADPARM;
    return AEE_SUCCESS;
}

int dsptrain_skel_handle_invoke(remote_handle64 handle, uint32_t sc, remote_arg *args)
{
    int rc;
    switch (REMOTE_SCALARS_METHOD(sc)) {
    case 0:   /* open: the URI in, the new handle out */
        if ((rc = buffers(sc, args, 1, 0, sizeof(remote_handle64)))) return rc;
        return dsptrain_open((const char *)args[0].buf.pv, (remote_handle64 *)args[1].buf.pv);
    case 1:
        return dsptrain_close(handle);
    case 2: { /* hello(in long arena_fd, in uint32 arena_bytes, rout dspt_hello_t info) */
        if ((rc = buffers(sc, args, 0, 8, sizeof(dspt_hello_t)))) return rc;
        const int32_t *in = args[0].buf.pv;
        return dsptrain_hello(handle, in[0], (unsigned int)in[1], (dspt_hello_t *)args[1].buf.pv);
    }
    case 3: { /* run(in long arena_fd, in uint32 first, in uint32 count, rout dspt_reply_t reply) */
        if ((rc = buffers(sc, args, 0, 12, sizeof(dspt_reply_t)))) return rc;
        const int32_t *in = args[0].buf.pv;
        return dsptrain_run(handle, in[0], (unsigned int)in[1], (unsigned int)in[2],
                            (dspt_reply_t *)args[1].buf.pv);
    }
    default:
        return AEE_EUNSUPPORTED;
    }
}
