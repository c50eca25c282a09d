# install.cmake: install rules, the CMake package (convt3d::convt3d) and convt3d.pc.
#
# Installed: lib/libconvt3d.so (C++ and C API, SONAME libconvt3d.so.<major>), lib/libconvt3d.a,
# include/convt3d/*.h, bin/convt3d, share/convt3d/problems/*.json (the CLI's named lists),
# lib/cmake/convt3d/ and lib/pkgconfig/convt3d.pc. A Python wheel build (SKBUILD) installs only
# the shared library, into the package folder.
include(CMakePackageConfigHelpers)

if(SKBUILD)
  # The wheel holds one real file (zip archives keep no symlinks), loaded by path with ctypes.
  install(FILES $<TARGET_FILE:convt3d_shared> DESTINATION convt3d RENAME libconvt3d.so
          COMPONENT python)
  return()
endif()

set(CONVT3D_CMAKE_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/convt3d)
install(TARGETS convt3d_shared EXPORT convt3dTargets
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
        INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(TARGETS convt3d EXPORT convt3dStaticTargets
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
        INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(TARGETS convt3d_cli RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
install(FILES include/convt3d/convt3d.h include/convt3d/convt3d_c.h
        DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/convt3d)
install(FILES problems/kernelbench_l1.json problems/models.json problems/bench.json
        DESTINATION ${CMAKE_INSTALL_DATADIR}/convt3d/problems)
install(FILES LICENSE README.md DESTINATION ${CMAKE_INSTALL_DOCDIR})

install(EXPORT convt3dTargets NAMESPACE convt3d:: DESTINATION ${CONVT3D_CMAKE_DIR})
install(EXPORT convt3dStaticTargets NAMESPACE convt3d:: DESTINATION ${CONVT3D_CMAKE_DIR})
configure_package_config_file(cmake/convt3dConfig.cmake.in
                              ${PROJECT_BINARY_DIR}/convt3dConfig.cmake
                              INSTALL_DESTINATION ${CONVT3D_CMAKE_DIR})
write_basic_package_version_file(${PROJECT_BINARY_DIR}/convt3dConfigVersion.cmake
                                 COMPATIBILITY SameMajorVersion)
install(FILES ${PROJECT_BINARY_DIR}/convt3dConfig.cmake
        ${PROJECT_BINARY_DIR}/convt3dConfigVersion.cmake DESTINATION ${CONVT3D_CMAKE_DIR})

# convt3d.pc finds its prefix from its own folder, so `cmake --install --prefix P` needs no
# reconfigure.
file(RELATIVE_PATH CONVT3D_PC_TO_PREFIX /prefix/${CMAKE_INSTALL_LIBDIR}/pkgconfig /prefix)
configure_file(cmake/convt3d.pc.in ${PROJECT_BINARY_DIR}/convt3d.pc @ONLY)
install(FILES ${PROJECT_BINARY_DIR}/convt3d.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
