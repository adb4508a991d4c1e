//! JSON read into a `serde_json::Value`, refusing an object that names a
//! key twice. serde_json keeps the last value silently, so a plan with two
//! `tasks` lists ran the second, and a schedule with two `cron` fields
//! fired on the second: what a reviewer read was not what ran. YAML
//! refuses a duplicate key already.

use std::collections::HashSet;
use std::fmt;

use serde::de::{self, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Number, Value};

/// `body` as JSON, every object's keys distinct.
pub fn from_slice(body: &[u8]) -> Result<Value, serde_json::Error> {
    let mut reader = serde_json::Deserializer::from_slice(body);
    let value = reader.deserialize_any(Unique)?;
    reader.end()?;
    Ok(value)
}

/// Builds a [`Value`] as serde_json does, but refuses a repeated key.
struct Unique;

impl<'de> de::DeserializeSeed<'de> for Unique {
    type Value = Value;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        d.deserialize_any(Unique)
    }
}

impl<'de> Visitor<'de> for Unique {
    type Value = Value;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_bool<E>(self, v: bool) -> Result<Value, E> {
        Ok(Value::Bool(v))
    }

    fn visit_i64<E>(self, v: i64) -> Result<Value, E> {
        Ok(Value::Number(v.into()))
    }

    fn visit_u64<E>(self, v: u64) -> Result<Value, E> {
        Ok(Value::Number(v.into()))
    }

    fn visit_f64<E>(self, v: f64) -> Result<Value, E> {
        Ok(Number::from_f64(v).map_or(Value::Null, Value::Number))
    }

    fn visit_str<E>(self, v: &str) -> Result<Value, E> {
        Ok(Value::String(v.to_owned()))
    }

    fn visit_string<E>(self, v: String) -> Result<Value, E> {
        Ok(Value::String(v))
    }

    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_none<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        d.deserialize_any(Unique)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let mut items = Vec::with_capacity(seq.size_hint().unwrap_or(0).min(4096));
        while let Some(item) = seq.next_element_seed(Unique)? {
            items.push(item);
        }
        Ok(Value::Array(items))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let mut object = Map::new();
        let mut seen = HashSet::new();
        while let Some(key) = map.next_key::<String>()? {
            if !seen.insert(key.clone()) {
                return Err(de::Error::custom(format_args!(
                    "the key `{key}` appears twice in one object"
                )));
            }
            let value = map.next_value_seed(Unique)?;
            object.insert(key, value);
        }
        Ok(Value::Object(object))
    }
}

#[cfg(test)]
mod tests {
    use super::from_slice;

    #[test]
    fn reads_what_serde_json_reads() {
        let text = br#"{"a": [1, -2, 2.5, "x", null, true, {"b": {}}], "c": 18446744073709551615}"#;
        let want: serde_json::Value = serde_json::from_slice(text).unwrap();
        assert_eq!(from_slice(text).unwrap(), want);
    }

    #[test]
    fn a_key_named_twice_is_refused_at_any_depth() {
        for text in [
            r#"{"tasks": [], "tasks": []}"#,
            r#"{"tasks": [{"sleep": "1s", "name": "a", "sleep": "2s"}]}"#,
        ] {
            let e = from_slice(text.as_bytes()).expect_err(text).to_string();
            assert!(e.contains("appears twice"), "{e}");
        }
        // The same key in two objects is fine.
        from_slice(br#"[{"a": 1}, {"a": 2}]"#).unwrap();
    }

    #[test]
    fn trailing_text_is_refused() {
        assert!(from_slice(br#"{"a": 1} x"#).is_err());
    }
}
