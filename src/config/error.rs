use std::fmt;

/// Why a configuration was refused: every bad field, by its path
/// (`routes[2].retry.attempts: must be at least 1, got 0`). A configuration with any bad field
/// is refused whole.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError {
    errors: Vec<FieldError>,
}

/// One bad field: where it is and what is wrong with its value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldError {
    /// The field's path: `default.deadline`, `routes[2].retry.attempts`.
    pub path: String,
    /// What is wrong, with the value given.
    pub message: String,
}

impl ConfigError {
    pub(crate) fn new(errors: Vec<FieldError>) -> Self {
        Self { errors }
    }

    pub(crate) fn one(path: impl Into<String>, message: impl Into<String>) -> Self {
        Self::new(vec![FieldError {
            path: path.into(),
            message: message.into(),
        }])
    }

    /// Every bad field, in the order of the configuration.
    pub fn errors(&self) -> &[FieldError] {
        &self.errors
    }
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, e) in self.errors.iter().enumerate() {
            if i > 0 {
                f.write_str("\n")?;
            }
            write!(f, "{e}")?;
        }
        Ok(())
    }
}

impl std::error::Error for ConfigError {}

impl fmt::Display for FieldError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.path.is_empty() {
            f.write_str(&self.message)
        } else {
            write!(f, "{}: {}", self.path, self.message)
        }
    }
}
