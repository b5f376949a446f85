"""Configuration: one TOML file, every key optional, secrets only from the environment.

:mod:`bot.config.loading` reads and checks the whole file at start-up into the
:class:`Config` of :mod:`bot.config.config`, which the rest of the bot reads
(:mod:`bot.config.agents` imports its tools and sub-agents);
:mod:`bot.config.models` declares every key once (pydantic), with the field types of
:mod:`bot.config.fields`; :mod:`bot.config.schema` turns the models into the JSON Schema editors
use and a validation error into one line per problem, named by its key.
"""

from bot.config.config import Config, ConfigError, parse_duration
from bot.config.loading import config_from_dict, config_path, load_config

__all__ = [
    "Config",
    "ConfigError",
    "config_from_dict",
    "config_path",
    "load_config",
    "parse_duration",
]
