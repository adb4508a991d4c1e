//! `GET /api/v1/openapi.json`: the OpenAPI 3.1 document of this API.
//!
//! Written by hand in `server/openapi.yaml` (YAML reads and reviews better
//! than JSON for a document this size) and served as JSON. A derive-based
//! generator would put proc macros on every view in `app`, which the wasm
//! build compiles too; instead the API tests check the document against the
//! router and against real answers, so it cannot drift unnoticed.

use std::sync::OnceLock;

use axum::Json;
use serde_json::Value;

const SOURCE: &str = include_str!("../../openapi.yaml");

/// The document, parsed once.
pub fn document() -> &'static Value {
    static DOCUMENT: OnceLock<Value> = OnceLock::new();
    DOCUMENT.get_or_init(|| {
        serde_saphyr::from_str(SOURCE)
            .expect("server/openapi.yaml is valid YAML (a unit test checks)")
    })
}

pub async fn openapi() -> Json<&'static Value> {
    Json(document())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every `$ref` names a schema or a response the document defines.
    #[test]
    fn the_document_parses_and_its_references_resolve() {
        let doc = document();
        assert_eq!(doc["openapi"], "3.1.0");
        let mut refs = Vec::new();
        collect_refs(doc, &mut refs);
        assert!(!refs.is_empty());
        for r in refs {
            let (kind, name) = r
                .strip_prefix("#/components/")
                .and_then(|rest| rest.split_once('/'))
                .unwrap_or_else(|| panic!("unexpected $ref {r}"));
            assert!(
                matches!(kind, "schemas" | "responses" | "parameters"),
                "unexpected $ref {r}"
            );
            let defined = doc["components"][kind].as_object();
            assert!(
                defined.is_some_and(|d| d.contains_key(name)),
                "$ref {r} is not defined"
            );
        }
    }

    fn collect_refs<'a>(value: &'a Value, out: &mut Vec<&'a str>) {
        match value {
            Value::Object(map) => {
                for (key, v) in map {
                    match (key.as_str(), v) {
                        ("$ref", Value::String(r)) => out.push(r),
                        _ => collect_refs(v, out),
                    }
                }
            }
            Value::Array(items) => items.iter().for_each(|v| collect_refs(v, out)),
            _ => {}
        }
    }
}
