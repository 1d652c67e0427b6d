//! Reading and writing a configuration: the values written as text, the `false` that switches
//! a section off, the path of a bad field, and environment overrides.

use super::{Config, ConfigError, Dur, FieldError, OrOff, RateSpec, StatusRange, Statuses};
use serde::de::{self, Deserializer, IntoDeserializer, Visitor};
use serde::{Deserialize, Serialize, Serializer};
use std::fmt;
use std::marker::PhantomData;

// === text values ===

macro_rules! as_text {
    ($ty:ty, $what:literal) => {
        impl Serialize for $ty {
            fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.collect_str(self)
            }
        }

        impl<'de> Deserialize<'de> for $ty {
            fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                struct V;
                impl Visitor<'_> for V {
                    type Value = $ty;
                    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                        f.write_str($what)
                    }
                    fn visit_str<E: de::Error>(self, v: &str) -> Result<$ty, E> {
                        v.parse().map_err(E::custom)
                    }
                }
                d.deserialize_str(V)
            }
        }
    };
}

as_text!(Dur, "a duration such as \"250ms\" or \"30s\"");
as_text!(RateSpec, "a rate such as \"25/s\"");

impl Serialize for StatusRange {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        if self.from == self.to {
            s.serialize_u16(self.from)
        } else {
            s.collect_str(self)
        }
    }
}

impl<'de> Deserialize<'de> for StatusRange {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = StatusRange;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a status (503) or a range (\"500-599\")")
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<StatusRange, E> {
                u16::try_from(v)
                    .map(StatusRange::one)
                    .map_err(|_| E::custom(format!("{v} is not a status")))
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<StatusRange, E> {
                u64::try_from(v)
                    .map_err(|_| E::custom(format!("{v} is not a status")))
                    .and_then(|v| self.visit_u64(v))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<StatusRange, E> {
                v.parse().map_err(E::custom)
            }
        }
        d.deserialize_any(V)
    }
}

impl Serialize for Statuses {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.0.serialize(s)
    }
}

impl<'de> Deserialize<'de> for Statuses {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        Vec::<StatusRange>::deserialize(d).map(Statuses)
    }
}

// === `false` for off ===

impl<T: Serialize> Serialize for OrOff<T> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            OrOff::Off => s.serialize_bool(false),
            OrOff::On(t) => t.serialize(s),
        }
    }
}

impl<'de, T: Deserialize<'de>> Deserialize<'de> for OrOff<T> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V<T>(PhantomData<T>);
        impl<'de, T: Deserialize<'de>> Visitor<'de> for V<T> {
            type Value = OrOff<T>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("its settings, or false for off")
            }
            fn visit_bool<E: de::Error>(self, v: bool) -> Result<OrOff<T>, E> {
                if v {
                    Err(E::custom(
                        "true says nothing: give the settings, or false for off",
                    ))
                } else {
                    Ok(OrOff::Off)
                }
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<OrOff<T>, E> {
                T::deserialize(v.into_deserializer()).map(OrOff::On)
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<OrOff<T>, E> {
                T::deserialize(v.into_deserializer()).map(OrOff::On)
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<OrOff<T>, E> {
                T::deserialize(v.into_deserializer()).map(OrOff::On)
            }
            fn visit_f64<E: de::Error>(self, v: f64) -> Result<OrOff<T>, E> {
                T::deserialize(v.into_deserializer()).map(OrOff::On)
            }
            fn visit_map<A: de::MapAccess<'de>>(self, map: A) -> Result<OrOff<T>, A::Error> {
                T::deserialize(de::value::MapAccessDeserializer::new(map)).map(OrOff::On)
            }
            fn visit_seq<A: de::SeqAccess<'de>>(self, seq: A) -> Result<OrOff<T>, A::Error> {
                T::deserialize(de::value::SeqAccessDeserializer::new(seq)).map(OrOff::On)
            }
        }
        d.deserialize_any(V(PhantomData))
    }
}

// === reading a whole configuration ===

impl Config {
    /// Reads a configuration from any serde format, and checks it whole: an unknown key, a
    /// value of the wrong type, or a bad setting is an error naming the field's path.
    ///
    /// ```
    /// use courier::config::Config;
    ///
    /// let text = r#"
    /// [default]
    /// deadline = "10s"
    ///
    /// [[routes]]
    /// match = { host = "api.partner.example" }
    /// rate_limit = { rate = "25/s", burst = 25 }
    /// "#;
    /// let config = Config::from_deserializer(toml::Deserializer::parse(text).unwrap()).unwrap();
    /// assert_eq!(config.routes.len(), 1);
    ///
    /// let bad = "[[routes]]\nmatch = {}\nretry = { attempts = 0 }\n";
    /// let err = Config::from_deserializer(toml::Deserializer::parse(bad).unwrap()).unwrap_err();
    /// assert_eq!(err.to_string(), "routes[0].retry.attempts: must be at least 1, got 0");
    /// ```
    ///
    /// # Errors
    ///
    /// A [`ConfigError`] naming the bad field or fields.
    pub fn from_deserializer<'de, D>(deserializer: D) -> Result<Config, ConfigError>
    where
        D: Deserializer<'de>,
    {
        let config: Config = serde_path_to_error::deserialize(deserializer).map_err(|e| {
            let path = e.path().to_string();
            let path = if path == "." { String::new() } else { path };
            ConfigError::one(path, e.into_inner().to_string())
        })?;
        config.validate()?;
        Ok(config)
    }

    /// The configuration with environment variables applied over it, checked whole.
    ///
    /// The scheme: a variable named `COURIER_` and the field's path in capitals, its parts
    /// joined by `__`, a route by its index: `COURIER_DEFAULT__DEADLINE=5s`,
    /// `COURIER_DEFAULT__RETRY__ATTEMPTS=2`, `COURIER_ROUTES__1__RATE_LIMIT__RATE=10/s`. A
    /// value is read as JSON when it is JSON (`5`, `false`, `[429, "500-599"]`), else as
    /// text. Only variables that start `COURIER_DEFAULT__` or `COURIER_ROUTES__` are read (other
    /// `COURIER_` variables belong to other tools, courier's own included); one of those that
    /// names no field is an error. Give it `std::env::vars()`.
    ///
    /// ```
    /// use courier::config::Config;
    ///
    /// let config = Config::default()
    ///     .env_overrides([("COURIER_DEFAULT__RETRY__ATTEMPTS".to_owned(), "5".to_owned())])
    ///     .unwrap();
    /// let retry = config.default.retry.unwrap();
    /// # let _ = retry;
    /// ```
    ///
    /// # Errors
    ///
    /// A [`ConfigError`]: a variable that names no field, by its name; a value refused, by its
    /// field's path (as a file's is) with the variable that set it
    /// (`default.retry.attempts: must be at least 1, got 0 (set by
    /// COURIER_DEFAULT__RETRY__ATTEMPTS)`).
    pub fn env_overrides(
        &self,
        vars: impl IntoIterator<Item = (String, String)>,
    ) -> Result<Config, ConfigError> {
        let mut tree = serde_json::to_value(self)
            .map_err(|e| ConfigError::one("", format!("the configuration: {e}")))?;
        let mut applied = Vec::new();
        for (name, value) in vars {
            let Some(path) = name
                .strip_prefix("COURIER_")
                .filter(|p| p.starts_with("DEFAULT__") || p.starts_with("ROUTES__"))
            else {
                continue;
            };
            let parsed = serde_json::from_str(&value)
                .unwrap_or_else(|_| serde_json::Value::String(value.clone()));
            set(&mut tree, path, parsed).map_err(|why| ConfigError::one(name.clone(), why))?;
            applied.push(name);
        }
        Config::from_deserializer(tree).map_err(|e| {
            // Each bad field keeps its path, and says which variable set it.
            let errors = e.errors().iter().map(|field| {
                let by = variable_for(&field.path, &applied).map_or_else(
                    || "after the environment overrides".to_owned(),
                    |v| format!("set by {v}"),
                );
                FieldError {
                    path: field.path.clone(),
                    message: format!("{} ({by})", field.message),
                }
            });
            ConfigError::new(errors.collect())
        })
    }
}

/// The variable among `applied` that set the field at `path` (`routes[1].retry.attempts`), or
/// a table holding it (`COURIER_ROUTES__1__RETRY`).
fn variable_for<'a>(path: &str, applied: &'a [String]) -> Option<&'a str> {
    let parts = path.replace('[', ".").replace(']', "");
    let parts: Vec<&str> = parts.split('.').filter(|p| !p.is_empty()).collect();
    // The last one wrote the value the field holds.
    applied
        .iter()
        .rfind(|name| {
            let named: Vec<&str> = name["COURIER_".len()..].split("__").collect();
            named.len() <= parts.len()
                && named
                    .iter()
                    .zip(&parts)
                    .all(|(n, p)| n.eq_ignore_ascii_case(p))
        })
        .map(String::as_str)
}

fn set(tree: &mut serde_json::Value, path: &str, value: serde_json::Value) -> Result<(), String> {
    let parts: Vec<String> = path.split("__").map(str::to_ascii_lowercase).collect();
    if parts.iter().any(String::is_empty) {
        return Err("an empty part in the name: join the parts with two underscores".into());
    }
    let mut at = tree;
    for (i, part) in parts.iter().enumerate() {
        let last = i + 1 == parts.len();
        at = match at {
            serde_json::Value::Object(map) => {
                if last {
                    map.insert(part.clone(), value);
                    return Ok(());
                }
                map.entry(part.clone())
                    .or_insert_with(|| serde_json::Value::Object(Default::default()))
            }
            serde_json::Value::Array(items) => {
                let index: usize = part
                    .parse()
                    .map_err(|_| format!("{part:?} is not a route's index"))?;
                let len = items.len();
                let item = items
                    .get_mut(index)
                    .ok_or_else(|| format!("there is no route {index} (the file has {len})"))?;
                if last {
                    *item = value;
                    return Ok(());
                }
                item
            }
            _ => return Err(format!("{part:?} is inside a setting that is not a table")),
        };
    }
    Ok(())
}
