//! The tower's tuning variables (`GLM5V_GPU_*`), read one way: unset gives the default, a
//! value that is not a whole number at least the minimum is an error naming the variable
//! (not a silent default: a mistyped knob would otherwise measure the default under its name).

use crate::GpuError;

/// `var` from the environment, else `default`; refused below `min` or unparsable.
pub(crate) fn usize_var(var: &str, default: usize, min: usize) -> Result<usize, GpuError> {
    parse(var, std::env::var(var).ok().as_deref(), default, min)
}

fn parse(var: &str, value: Option<&str>, default: usize, min: usize) -> Result<usize, GpuError> {
    let Some(v) = value else {
        return Ok(default);
    };
    match v.trim().parse::<usize>() {
        Ok(n) if n >= min => Ok(n),
        _ => Err(GpuError::Unsupported(format!(
            "{var}={v:?}: expected a whole number of at least {min}"
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::parse;

    #[test]
    fn unset_is_the_default_and_bad_values_name_the_variable() {
        assert_eq!(parse("GLM5V_GPU_X", None, 7, 1).unwrap(), 7);
        assert_eq!(parse("GLM5V_GPU_X", Some(" 64 "), 7, 1).unwrap(), 64);
        assert_eq!(parse("GLM5V_GPU_X", Some("0"), 7, 0).unwrap(), 0);
        for bad in ["0", "-3", "abc", "", "1.5"] {
            let e = parse("GLM5V_GPU_X", Some(bad), 7, 1)
                .unwrap_err()
                .to_string();
            assert!(
                e.contains("GLM5V_GPU_X") && e.contains("at least 1"),
                "{bad}: {e}"
            );
        }
    }
}
