"""A recipe of per-crop transforms (`east-train --augment RECIPE`, Loader(transform="aug.yaml")): read from a file,
written into a checkpoint, made again from it on --resume.

A recipe is a file albumentations writes itself (A.save(pipeline, "aug.yaml", data_format="yaml"), or .json), or
`file.py:name`, a pipeline object or callable that a Python file defines. Its record ({"recipe": how it was named,
"format": yaml | json | python, "text": the file's text, "name": the object's name}) is what a checkpoint keeps:
--resume makes the transform again from that text, whatever the file holds by then. A recipe that does not load is
one UsageError naming the recipe and the transform at fault (an unknown class, arguments it refuses); so is a file
that is not UTF-8 text, not YAML or JSON, larger than MAX_RECIPE_BYTES, or a YAML file holding an alias (*name: a
"billion laughs" of a kilobyte expands to 10^12 transforms; albumentations' A.save writes none). A checkpoint's
record that is not one (a damaged or hand-edited checkpoint) is refused naming the checkpoint.
"""
from __future__ import annotations

import importlib.util
import json
from pathlib import Path

from east_cache.errors import UsageError
from east_cache.inputs import Input
from east_cache.reader.transform import CropTransform, kind_of

RECIPE_FORMATS = {".yaml": "yaml", ".yml": "yaml", ".json": "json"}   # albumentations' own file formats
RECORD_FORMATS = ("yaml", "json", "python")
MAX_RECIPE_BYTES = 1 << 20   # a recipe file's largest size (a pipeline of thousands of transforms takes a few kB)
INSTALL = 'pip install "east-cache[augment]"'


def albumentations_record(transform, recipe: str) -> dict | None:
    """An albumentations pipeline written down as albumentations serialises it (JSON), for a checkpoint; None for
    other transforms and for pipelines holding a transform that cannot be serialised (a Lambda)."""
    if kind_of(transform) != "albumentations":
        return None
    import albumentations as A
    try:
        text = json.dumps(A.to_dict(transform))
    except Exception:   # noqa: BLE001 - NotImplementedError, a value json cannot write: not recorded
        return None
    return {"recipe": recipe, "format": "json", "text": text, "name": None}


def recipe_path(spec) -> Path:
    """The file a recipe names: PATH itself, or the Python file of PATH.py:NAME."""
    spec = str(spec)
    return Path(spec.rpartition(":")[0] if ".py:" in spec else spec)


def recipe_inputs(spec, flag: str = "--augment") -> list[Input]:
    """A recipe as a command's input (inputs.Input), which no output may be or replace: its file (a Python file's
    too); none for a transform object or no recipe."""
    if not isinstance(spec, (str, Path)):
        return []
    return [Input(f"the recipe {flag} {spec}", recipe_path(spec))]


def load_recipe(spec) -> CropTransform:
    """The transform a recipe names: PATH.yaml / .yml / .json (albumentations' A.save format) or PATH.py:NAME (an
    object of a Python file). A recipe that does not load is a UsageError naming it and the transform at fault."""
    spec = str(spec)
    path, _, name = spec.rpartition(":") if ".py:" in spec else (spec, "", "")
    path = Path(path)
    if not path.is_file():
        raise UsageError(f"--augment {spec}: no such file; pass an albumentations pipeline file (A.save(pipeline, "
                         f"'aug.yaml', data_format='yaml'), or .json) or FILE.py:NAME")
    if path.stat().st_size > MAX_RECIPE_BYTES:
        raise UsageError(f"--augment {spec}: {path.stat().st_size} bytes, more than a recipe's {MAX_RECIPE_BYTES}; "
                         f"pass an albumentations pipeline file")
    try:
        text = path.read_bytes().decode("utf-8")
    except UnicodeDecodeError as e:
        raise UsageError(f"--augment {spec}: not a text file (byte {e.start} is not UTF-8); pass an albumentations "
                         f"pipeline file (A.save(pipeline, 'aug.yaml', data_format='yaml'), or .json) or "
                         f"FILE.py:NAME") from None
    fmt = "python" if name else RECIPE_FORMATS.get(path.suffix.lower())
    if fmt is None:
        raise UsageError(f"--augment {spec}: a recipe is a .yaml, .yml or .json file albumentations saved, or "
                         f"FILE.py:NAME naming a pipeline or callable in a Python file")
    return from_record({"recipe": spec, "format": fmt, "text": text, "name": name or None})


def from_record(record: dict) -> CropTransform:
    """A transform made again from its record (load_recipe's, or a checkpoint's)."""
    spec, fmt, text = record["recipe"], record["format"], record["text"]
    if fmt == "python":
        return CropTransform(python_object(spec, text, record["name"]), spec, record, f"--augment {spec}")
    return CropTransform(albumentations_pipeline(spec, text, fmt), spec, record, f"--augment {spec}")


def python_object(spec: str, text: str, name: str):
    """Object `name` of the Python source `text` (the file `spec` names), run as a module of its own."""
    module_spec = importlib.util.spec_from_loader(f"east_cache_recipe_{abs(hash(spec))}", loader=None)
    module = importlib.util.module_from_spec(module_spec)
    module.__file__ = spec.rpartition(":")[0]
    try:
        exec(compile(text, module.__file__, "exec"), module.__dict__)   # noqa: S102 - the user's own recipe file
    except Exception as e:   # noqa: BLE001 - the user's file failed: named
        raise UsageError(f"--augment {spec}: the file failed to run: {type(e).__name__}: {e}") from e
    if name not in module.__dict__:
        raise UsageError(f"--augment {spec}: the file defines no {name!r}; name a pipeline or callable it defines")
    return module.__dict__[name]


def albumentations_pipeline(spec: str, text: str, fmt: str):
    """The pipeline an albumentations file (its text, `fmt` yaml or json) describes."""
    try:
        import albumentations as A
    except ImportError:
        raise UsageError(f"--augment {spec}: albumentations is not installed: {INSTALL}") from None
    try:
        data = yaml_data(spec, text) if fmt == "yaml" else json.loads(text)
    except UsageError:
        raise
    except Exception as e:   # noqa: BLE001 - yaml's and json's errors: named, on one line
        raise UsageError(f"--augment {spec}: not a {fmt} file: {parse_error(e)}") from None
    if not isinstance(data, dict) or not isinstance(data.get("transform"), dict):
        raise UsageError(f"--augment {spec}: not an albumentations pipeline (no 'transform' entry); write one with "
                         f"A.save(pipeline, '{Path(spec).name}', data_format='{fmt}')")
    unknown = unknown_transforms(data["transform"])
    if unknown:
        raise UsageError(f"--augment {spec}: unknown transform {', '.join(unknown)} (albumentations "
                         f"{A.__version__} has no such class); check the name and the albumentations version")
    try:
        return A.from_dict(data)
    except Exception as e:   # noqa: BLE001 - a transform's arguments refused: say which
        raise UsageError(f"--augment {spec}: transform {bad_arguments(data['transform'])} does not load: "
                         f"{' '.join(str(e).split())}") from None


def yaml_data(spec: str, text: str):
    """The YAML text's data, read by yaml's safe loader refusing any alias (*name), which names the line."""
    import yaml

    class NoAliases(yaml.SafeLoader):
        def compose_node(self, parent, index):
            if self.check_event(yaml.AliasEvent):
                event = self.peek_event()
                raise UsageError(f"--augment {spec}: line {event.start_mark.line + 1}: a YAML alias (*{event.anchor}) "
                                 f"is refused (aliases can expand a small file without end); write the values out, as "
                                 f"albumentations' A.save does")
            return super().compose_node(parent, index)
    return yaml.load(text, Loader=NoAliases)   # noqa: S506 - a safe loader, aliases refused


def parse_error(e: Exception) -> str:
    """A YAML or JSON parse error in one line: what is wrong and where (line and column)."""
    mark = getattr(e, "problem_mark", None)
    if mark is not None:
        return f"{getattr(e, 'problem', None) or 'cannot be read'} at line {mark.line + 1}, column {mark.column + 1}"
    return " ".join(str(e).split())


def check_record(record, checkpoint) -> dict:
    """A checkpoint's recorded transform ({"recipe", "format", "text", "name"}: what recipe.py writes), else a
    UsageError naming the checkpoint."""
    if (isinstance(record, dict) and isinstance(record.get("recipe"), str) and record.get("format") in RECORD_FORMATS
            and isinstance(record.get("text"), str) and isinstance(record.get("name"), (str, type(None)))
            and (record["format"] != "python" or record["name"])):
        return record
    raise UsageError(f"--resume {checkpoint}: its recorded --augment recipe is not one (a {type(record).__name__}, "
                     f"not the record a run writes); pass the recipe again with --augment RECIPE")


def leaf_transforms(node: dict) -> list[dict]:
    """The transforms of a serialised pipeline, depth first (the compositions' members)."""
    inner = node.get("transforms")
    if isinstance(inner, list):
        return [leaf for t in inner if isinstance(t, dict) for leaf in leaf_transforms(t)]
    return [node]


def unknown_transforms(node: dict) -> list[str]:
    """The class names in a serialised pipeline that albumentations does not know."""
    from albumentations.core.serialization import SERIALIZABLE_REGISTRY, shorten_class_name
    names = []

    def walk(n: dict) -> None:
        name = str(n.get("__class_fullname__"))
        if shorten_class_name(name) not in SERIALIZABLE_REGISTRY:
            names.append(name)
        for t in n.get("transforms", []) if isinstance(n.get("transforms"), list) else []:
            if isinstance(t, dict):
                walk(t)

    walk(node)
    return names


def bad_arguments(node: dict) -> str:
    """The first transform of a serialised pipeline that albumentations refuses to make, by name."""
    import albumentations as A
    for leaf in leaf_transforms(node):
        try:
            A.from_dict({"transform": leaf})
        except Exception:   # noqa: BLE001 - the one we look for
            return str(leaf.get("__class_fullname__"))
    return str(node.get("__class_fullname__"))


def as_transform(transform) -> CropTransform | None:
    """What Loader and CacheDataset take as transform=: None, a recipe (a path or `file.py:name`), a transform
    object, or a CropTransform."""
    if transform is None or isinstance(transform, CropTransform):
        return transform
    if isinstance(transform, (str, Path)):
        return load_recipe(transform)
    return CropTransform(transform, record=albumentations_record(transform, type(transform).__name__))


def run_recipe(spec: str | None, recorded: dict | None, resumed: str | None, say, warn) -> CropTransform | None:
    """The transform a training run applies: --augment's recipe (spec) or, resuming, the recipe the checkpoint
    `resumed` recorded (its text, whatever the file holds now), so a resumed run reads the crops it would have.
    A recipe given with --resume that differs from the recorded one replaces it, with a warning (`warn`; `say`
    tells which recipe a resume reuses): the crops from there on are not those the first run would have read."""
    if spec is None:
        if recorded is None:
            return None
        recorded = check_record(recorded, resumed)
        say(f"--augment {recorded['recipe']}: as recorded in {resumed}")
        return from_record(recorded)
    transform = load_recipe(spec)
    if recorded is not None and resumed:
        try:
            check_record(recorded, resumed)
        except UsageError:   # unreadable: the recipe given goes on, said
            warn(f"{resumed}: its recorded --augment recipe cannot be read; going on with --augment {spec}")
            return transform
    if resumed and (recorded or {}).get("text") != transform.record["text"]:
        was = f"--augment {recorded['recipe']}" if recorded else "no --augment"
        warn(f"{resumed} was trained with {was}; going on with --augment {spec}: its crops from here on "
             f"differ from those the first run would have read")
    return transform
