"""Helpers the tests share: constants, clients and builders, imported by test modules and conftest files alike.

Fixtures stay in the conftest files; what a test module imports by name lives here, so that no test
module imports a conftest module.
"""
