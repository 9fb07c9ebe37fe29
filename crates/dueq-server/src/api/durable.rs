//! Durable writes per request: the `replicas` a write asks for.

/// The queue handle with the durable writes a request asks for (`replicas`; `None`: the
/// server's own setting).
pub(crate) fn durable(
    q: dueq::Queue,
    replicas: Option<u8>,
) -> crate::error::ApiResult<dueq::Queue> {
    match replicas {
        None => Ok(q),
        Some(n) if n > dueq::MAX_REPLICAS => Err(crate::error::ApiError::invalid(format!(
            "replicas must be 0 to {}",
            dueq::MAX_REPLICAS
        ))),
        Some(n) => Ok(q.with_replicas(n, dueq::DEFAULT_REPLICA_TIMEOUT_MS)),
    }
}
