"""Maintainer workflows around the hook engine (git, smoke runs): moving an upstream submodule."""
