# SPDX-License-Identifier: Apache-2.0
# Read by cpack after the generated CPackConfig.cmake (CPACK_PROJECT_CONFIG_FILE).
# CPackDeb puts CPACK_PACKAGE_DESCRIPTION_SUMMARY (the project's description
# unless set) in front of every component's description, which would give all
# the packages one synopsis; it leaves CPack's own default summary out, so
# each package's CPACK_DEBIAN_<COMPONENT>_DESCRIPTION keeps its first line.
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY "${CPACK_DEFAULT_PACKAGE_DESCRIPTION_SUMMARY}")
