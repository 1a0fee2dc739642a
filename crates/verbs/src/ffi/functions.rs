// The functions crates/verbs calls in libibverbs.so.1 and librdmacm.so.1: each line is
// the symbol version a program compiled against rdma-core 44's headers binds to at
// link time (the default `@@` version, `objdump -T`), then the header's prototype in
// Rust types. `crate::ffi` resolves each with `dlvsym` at that version, so a later
// rdma-core that changes a function's ABI under a new version still gives us the
// one written here. crates/verbs/scripts/gen-bindings checks every prototype against the headers.
//
// Not here, because the headers implement them inline (crate::ffi does the same):
// ibv_post_send, ibv_post_recv, ibv_poll_cq, ibv_req_notify_cq (through
// `context->ops`), ibv_query_port's wrapper (extended context, else the exported
// compat function below), ibv_reg_mr's macro (the exported ibv_reg_mr below for
// access flags without optional bits).
functions! {
    /// libibverbs.so.1 (`<infiniband/verbs.h>`).
    Verbs {
        "IBVERBS_1.1" fn ibv_get_device_list(num_devices: *mut c_int) -> *mut *mut ibv_device;
        "IBVERBS_1.1" fn ibv_free_device_list(list: *mut *mut ibv_device);
        "IBVERBS_1.1" fn ibv_open_device(device: *mut ibv_device) -> *mut ibv_context;
        "IBVERBS_1.1" fn ibv_close_device(context: *mut ibv_context) -> c_int;
        "IBVERBS_1.1" fn ibv_query_device(
            context: *mut ibv_context,
            device_attr: *mut ibv_device_attr,
        ) -> c_int;
        "IBVERBS_1.1" fn ibv_query_port(
            context: *mut ibv_context,
            port_num: u8,
            port_attr: *mut _compat_ibv_port_attr,
        ) -> c_int;
        "IBVERBS_1.1" fn ibv_alloc_pd(context: *mut ibv_context) -> *mut ibv_pd;
        "IBVERBS_1.1" fn ibv_dealloc_pd(pd: *mut ibv_pd) -> c_int;
        "IBVERBS_1.1" fn ibv_reg_mr(
            pd: *mut ibv_pd,
            addr: *mut c_void,
            length: usize,
            access: c_int,
        ) -> *mut ibv_mr;
        "IBVERBS_1.1" fn ibv_dereg_mr(mr: *mut ibv_mr) -> c_int;
        "IBVERBS_1.0" fn ibv_create_comp_channel(context: *mut ibv_context) -> *mut ibv_comp_channel;
        "IBVERBS_1.0" fn ibv_destroy_comp_channel(channel: *mut ibv_comp_channel) -> c_int;
        "IBVERBS_1.1" fn ibv_create_cq(
            context: *mut ibv_context,
            cqe: c_int,
            cq_context: *mut c_void,
            channel: *mut ibv_comp_channel,
            comp_vector: c_int,
        ) -> *mut ibv_cq;
        "IBVERBS_1.1" fn ibv_destroy_cq(cq: *mut ibv_cq) -> c_int;
        "IBVERBS_1.1" fn ibv_get_cq_event(
            channel: *mut ibv_comp_channel,
            cq: *mut *mut ibv_cq,
            cq_context: *mut *mut c_void,
        ) -> c_int;
        "IBVERBS_1.1" fn ibv_ack_cq_events(cq: *mut ibv_cq, nevents: c_uint);
        "IBVERBS_1.1" fn ibv_get_async_event(
            context: *mut ibv_context,
            event: *mut ibv_async_event,
        ) -> c_int;
        "IBVERBS_1.1" fn ibv_ack_async_event(event: *mut ibv_async_event);
    }
    /// librdmacm.so.1 (`<rdma/rdma_cma.h>`).
    Rdmacm {
        "RDMACM_1.0" fn rdma_create_event_channel() -> *mut rdma_event_channel;
        "RDMACM_1.0" fn rdma_destroy_event_channel(channel: *mut rdma_event_channel);
        "RDMACM_1.0" fn rdma_create_id(
            channel: *mut rdma_event_channel,
            id: *mut *mut rdma_cm_id,
            context: *mut c_void,
            ps: rdma_port_space::Type,
        ) -> c_int;
        "RDMACM_1.0" fn rdma_destroy_id(id: *mut rdma_cm_id) -> c_int;
        "RDMACM_1.0" fn rdma_bind_addr(id: *mut rdma_cm_id, addr: *mut sockaddr) -> c_int;
        "RDMACM_1.0" fn rdma_resolve_addr(
            id: *mut rdma_cm_id,
            src_addr: *mut sockaddr,
            dst_addr: *mut sockaddr,
            timeout_ms: c_int,
        ) -> c_int;
        "RDMACM_1.0" fn rdma_resolve_route(id: *mut rdma_cm_id, timeout_ms: c_int) -> c_int;
        "RDMACM_1.0" fn rdma_create_qp(
            id: *mut rdma_cm_id,
            pd: *mut ibv_pd,
            qp_init_attr: *mut ibv_qp_init_attr,
        ) -> c_int;
        "RDMACM_1.0" fn rdma_destroy_qp(id: *mut rdma_cm_id);
        "RDMACM_1.0" fn rdma_connect(id: *mut rdma_cm_id, conn_param: *mut rdma_conn_param) -> c_int;
        "RDMACM_1.0" fn rdma_listen(id: *mut rdma_cm_id, backlog: c_int) -> c_int;
        "RDMACM_1.0" fn rdma_accept(id: *mut rdma_cm_id, conn_param: *mut rdma_conn_param) -> c_int;
        "RDMACM_1.0" fn rdma_reject(
            id: *mut rdma_cm_id,
            private_data: *const c_void,
            private_data_len: u8,
        ) -> c_int;
        "RDMACM_1.0" fn rdma_disconnect(id: *mut rdma_cm_id) -> c_int;
        "RDMACM_1.0" fn rdma_get_cm_event(
            channel: *mut rdma_event_channel,
            event: *mut *mut rdma_cm_event,
        ) -> c_int;
        "RDMACM_1.0" fn rdma_ack_cm_event(event: *mut rdma_cm_event) -> c_int;
        "RDMACM_1.0" fn rdma_migrate_id(id: *mut rdma_cm_id, channel: *mut rdma_event_channel) -> c_int;
    }
}
