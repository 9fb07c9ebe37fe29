//! The OpenAPI document of the API, generated from the handlers' annotations (utoipa) and
//! served at `/openapi.json`. A test checks it against the router and DESIGN 4.2.

use std::sync::OnceLock;

use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
use utoipa::openapi::{OpenApi as Doc, SecurityRequirement};
use utoipa::{Modify, OpenApi};

use crate::api;

#[derive(OpenApi)]
#[openapi(
    info(
        title = "dueq",
        description = "Delay queue and task scheduler on Redis sorted sets. Times are integer \
            milliseconds; errors are {\"error\": {\"code\", \"message\"}}. When tokens are \
            configured, every /v1 call needs Authorization: Bearer <token>."
    ),
    modifiers(&Bearer)
)]
struct ApiDoc;

struct Bearer;

impl Modify for Bearer {
    fn modify(&self, doc: &mut Doc) {
        let components = doc.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            "bearer",
            SecurityScheme::Http(HttpBuilder::new().scheme(HttpAuthScheme::Bearer).build()),
        );
    }
}

/// The OpenAPI document (built once).
pub fn openapi() -> Doc {
    static DOC: OnceLock<Doc> = OnceLock::new();
    DOC.get_or_init(|| {
        let (_, mut v1) = api::v1_routes()
            .merge(api::batch_routes())
            .merge(api::claim_routes())
            .split_for_parts();
        for item in v1.paths.paths.values_mut() {
            for op in [
                &mut item.get,
                &mut item.post,
                &mut item.put,
                &mut item.patch,
                &mut item.delete,
            ]
            .into_iter()
            .flatten()
            {
                op.security = Some(vec![SecurityRequirement::new(
                    "bearer",
                    Vec::<String>::new(),
                )]);
            }
        }
        let (_, system) = api::system_routes().split_for_parts();
        let mut doc = ApiDoc::openapi();
        doc.merge(v1);
        doc.merge(system);
        doc
    })
    .clone()
}

/// Every (method, path) of the document, sorted, methods upper-case.
pub fn operations(doc: &Doc) -> Vec<(String, String)> {
    let mut v = Vec::new();
    for (path, item) in &doc.paths.paths {
        for (m, op) in [
            ("GET", &item.get),
            ("POST", &item.post),
            ("PUT", &item.put),
            ("PATCH", &item.patch),
            ("DELETE", &item.delete),
        ] {
            if op.is_some() {
                v.push((m.to_owned(), path.clone()));
            }
        }
    }
    v.sort();
    v
}
