# SPDX-License-Identifier: Apache-2.0
"""Plugin option values as the text the plugins parse."""


def option_text(name, value):
    """bool -> "true"/"false", a list -> comma-separated (a string list
    option), str/int/float as written; anything else is a ValueError."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (list, tuple)):
        return ",".join(str(v) for v in value)
    if isinstance(value, (int, float, str)):
        return str(value)
    raise ValueError(f"option {name} = {value!r}: a {type(value).__name__} is no option value; "
                     f"valid: str, int, float, bool, or a list of str")


def options_text(options):
    return {name: option_text(name, value) for name, value in (options or {}).items()}
