# Sourced by the wrapper scripts: picks the Python that runs otca-patch into $python.
# OTCA_PYTHON wins; else `python` on PATH when it can import otca_patch (the training environment);
# else this repo's .venv. The check runs from / : in this repo `python -c` would import the package
# from the current directory only.
python="${OTCA_PYTHON:-}"
if [ -z "$python" ]; then
  if command -v python >/dev/null 2>&1 && (cd / && python -c "import otca_patch") 2>/dev/null; then
    python=python
  else
    python="$here/.venv/bin/python"
  fi
fi
