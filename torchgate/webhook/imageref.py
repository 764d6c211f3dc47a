"""Container image references, checked with the grammar the kubelet uses.

Why check images at admission: neither the PyTorchJob CRD nor the apiserver looks inside the pod
template's ``image`` strings, so ``gcr.io/<your_project>/mnist:latest`` or an envsubst template's
``${IMAGE_URI}`` is accepted, the controller creates pods, and every pod sits in
``InvalidImageName`` while holding its GPUs in the gang. The kubelet parses images with
``distribution/reference.ParseNormalizedNamed``; this module implements the same grammar
(registry host[:port], lower-case path components, optional ``:tag``, optional ``@digest``) and
says, when it can, which unfilled template placeholder is to blame.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from typing import Final

NAME_MAX_LENGTH: Final = 255
_TAG_MAX_LENGTH: Final = 128
# Digest algorithms the runtime knows, with the length of their lower-case hex encoding.
_DIGEST_HEX_LENGTHS: Final = {"sha256": 64, "sha384": 96, "sha512": 128}
# The longest valid reference (name:tag@sha512:...); anything longer is refused before the regex.
_IMAGE_MAX_LENGTH: Final = NAME_MAX_LENGTH + 1 + _TAG_MAX_LENGTH + 1 + len("sha512:") + 128

_ALPHANUMERIC = r"[a-z0-9]+"
_SEPARATOR = r"(?:[._]|__|-+)"
_PATH_COMPONENT = rf"{_ALPHANUMERIC}(?:{_SEPARATOR}{_ALPHANUMERIC})*"
_DOMAIN_COMPONENT = r"(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])"
_HOST = rf"(?:{_DOMAIN_COMPONENT}(?:\.{_DOMAIN_COMPONENT})*|\[[a-fA-F0-9:]+\])"
_DOMAIN = rf"{_HOST}(?::[0-9]+)?"
_TAG = rf"\w[\w.-]{{0,{_TAG_MAX_LENGTH - 1}}}"
_DIGEST = r"[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*:[0-9a-fA-F]{32,}"
_REFERENCE = re.compile(
    rf"(?:(?P<domain>{_DOMAIN})/)?(?P<path>{_PATH_COMPONENT}(?:/{_PATH_COMPONENT})*)"
    rf"(?::(?P<tag>{_TAG}))?(?:@(?P<digest>{_DIGEST}))?",
    re.ASCII,
)
_IDENTIFIER = re.compile(r"[a-f0-9]{64}", re.ASCII)
_LOWER_HEX = re.compile(r"[a-f0-9]+", re.ASCII)

# Unfilled placeholders of the usual templating tools, most specific first.
_PLACEHOLDERS = re.compile(
    r"\$\{[^}]*\}?"  # envsubst / shell: ${IMAGE_URI}
    r"|\$\([^)]*\)?"  # Kubernetes-style $(IMAGE); not expanded in image fields
    r"|\$[A-Za-z_][A-Za-z0-9_]*"  # $IMAGE
    r"|\{\{.*?\}\}"  # Helm / Jinja: {{ .Values.image }}
    r"|<[^<>]*>"  # docs: <your_project>, <训练镜像>
    r"|\b(?:YOUR|MY)_[A-Z0-9_]+\b"  # YOUR_REGISTRY
)
_LONE_PLACEHOLDER = re.compile(r"<[^<>]+>")


@dataclass(frozen=True, slots=True)
class ImageReference:
    """The parts of a valid image reference (``domain`` is None for Docker Hub short names)."""

    domain: str | None
    path: str
    tag: str | None
    digest: str | None


class ImageReferenceError(ValueError):
    """An image string the kubelet would refuse (pods end in ``InvalidImageName``)."""


def parse_image_reference(image: str) -> ImageReference:
    """Parse ``image`` like the kubelet does; raise ``ImageReferenceError`` saying why not."""
    if not image:
        raise ImageReferenceError("must not be empty")
    if image != image.strip():
        raise ImageReferenceError("must not have leading or trailing whitespace")
    if len(image) > _IMAGE_MAX_LENGTH:
        raise ImageReferenceError(f"must be at most {_IMAGE_MAX_LENGTH} characters")
    if _IDENTIFIER.fullmatch(image):
        raise ImageReferenceError("must name a repository, not a 64-character image ID")
    match = _REFERENCE.fullmatch(image)
    if match is None:
        if _REFERENCE.fullmatch(image.lower()) is not None:
            raise ImageReferenceError("repository name must be lowercase")
        raise ImageReferenceError(
            "invalid reference format (expected [registry[:port]/]repository[:tag][@digest])"
        )
    domain, path = match["domain"], match["path"]
    name_length = len(path) + (len(domain) + 1 if domain else 0)
    if name_length > NAME_MAX_LENGTH:
        raise ImageReferenceError(
            f"repository name must not be more than {NAME_MAX_LENGTH} characters"
        )
    digest = match["digest"]
    if digest is not None:
        _check_digest(digest)
    return ImageReference(domain, path, match["tag"], digest)


@functools.lru_cache(maxsize=1024)
def image_reference_problem(image: str) -> str | None:
    """Why ``image`` is not a valid reference, as a message detail; None when it is valid.

    Names the unfilled template placeholder when there is one, since that is the usual cause.
    """
    try:
        parse_image_reference(image)
    except ImageReferenceError as error:
        placeholder = unfilled_placeholder(image)
        if placeholder is not None:
            return (
                f"looks like an unfilled template placeholder {placeholder}; substitute it "
                f"before applying (Kubernetes never expands variables in image): {error}"
            )
        return f"not a valid image reference: {error}"
    return None


def unfilled_placeholder(image: str) -> str | None:
    """The first template placeholder in ``image`` (``${IMAGE_URI}``, ``<your_project>``...)."""
    match = _PLACEHOLDERS.search(image, 0, _IMAGE_MAX_LENGTH)  # bounded: this runs on any text
    return match[0] if match else None


def is_lone_placeholder(image: str) -> bool:
    """Whether ``image`` is nothing but one angle-bracket placeholder, like ``<训练镜像>``."""
    return _LONE_PLACEHOLDER.fullmatch(image.strip()) is not None


def _check_digest(digest: str) -> None:
    algorithm, _, encoded = digest.partition(":")
    expected = _DIGEST_HEX_LENGTHS.get(algorithm)
    if expected is None:
        raise ImageReferenceError(
            f"unsupported digest algorithm {algorithm!r} (use sha256, sha384 or sha512)"
        )
    if len(encoded) != expected or not _LOWER_HEX.fullmatch(encoded):
        raise ImageReferenceError(
            f"invalid {algorithm} digest: must be {expected} lower-case hexadecimal characters"
        )
